-- cli_test: booster:save_optimizer / load_optimizer / save_model / load_model
-- round trips on one process, and the errors for objects of another booster.
local colossal = require("colossal")
colossal.launch { device = "cpu", seed = 5 }
local data = colossal.data.prepare { input = "corpus", output = "data/tiny", name = "tiny" }
local function make()
  local model = colossal.model.gpt2 { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 }
  local opt = colossal.optim.adamw(model, { lr = 1e-2 })
  local booster = colossal.booster {}
  local loader = colossal.data.loader { pattern = data.train, batch_size = 2, seq_len = 8, shuffle = false }
  model, opt, loader = booster:boost(model, opt, loader)
  return model, opt, loader, booster
end
local function step(model, opt, loader, booster)
  opt:zero_grad()
  local loss = model(loader:next())
  booster:backward(loss, opt)
  opt:step()
  return loss:item()
end

local m1, o1, l1, b1 = make()
step(m1, o1, l1, b1)
b1:save_optimizer(o1, "saved/optimizer")
local model_dir = b1:save_model(m1, "saved/model")
local a = step(m1, o1, l1, b1)

local m2, o2, l2, b2 = make()
l2:next()  -- the same data position as l1 after its first step
b2:load_model(m2, model_dir)
b2:load_optimizer(o2, "saved/optimizer")
local b = step(m2, o2, l2, b2)
assert(a == b, string.format("after the round trip the loss differs: %.9g vs %.9g", a, b))
local ok, err = pcall(b2.save_optimizer, b2, o1, "saved/other")
assert(not ok and tostring(err):find("not the boosted optimizer"), tostring(err))
print(string.format("optimizer_io: ok (%.6f)", a))
