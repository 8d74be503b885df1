-- expect: line 8: optimizer:set_lr: lr must be >= 0 (a finite float32), got 1e+300
-- A learning rate finite as a double but not as the float the kernels take
-- (1e300 became inf and every weight NaN at the first step).
local colossal = require("colossal")
colossal.launch { device = "cpu", seed = 1 }
local model = colossal.model.gpt2 { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 }
local optimizer = colossal.optim.adamw(model, { lr = 1e-3 })
optimizer:set_lr(1e300)
