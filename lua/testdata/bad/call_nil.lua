-- expect: line 5: attempt to call a nil value (field 'envv')
-- Calls a function the colossal module does not have.
local colossal = require("colossal")
local gpu = colossal.env().device ~= "cpu"
local world = colossal.envv().world_size
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = gpu and 8 or 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 * world },
  steps = 2,
}
