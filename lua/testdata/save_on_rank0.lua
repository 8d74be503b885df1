-- A script that saves on rank 0 only (a common mistake with the imperative
-- API): cli_test runs it on two workers with a short COLOSSAL_TIMEOUT and
-- expects rank 0's save to fail naming rank 1 instead of hanging.
local colossal = require("colossal")
local env = colossal.launch { device = "cpu", seed = 1 }
local data = colossal.data.prepare { input = "corpus", output = "data/tiny", name = "tiny" }
local model = colossal.model.gpt2 { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 8 }
local optimizer = colossal.optim.adamw(model, { lr = 1e-2 })
local booster = colossal.booster { plugin = colossal.plugin.low_level_zero { stage = 2 } }
local loader = colossal.data.loader { pattern = data.train, batch_size = 2, seq_len = 8 }
model, optimizer, loader = booster:boost(model, optimizer, loader)
optimizer:zero_grad()
booster:backward(model(loader:next()), optimizer)
optimizer:step()
if env.rank == 0 then
  booster:save_checkpoint("checkpoints/rank0", { step = 1 })
end
