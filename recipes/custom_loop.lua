-- The imperative API, Colossal-AI style: the same loop the declarative
-- recipes run, written out. This script trains by itself and returns nothing.
--
--   ./colossal recipes/custom_loop.lua --set steps=10 --set lr=3e-3
--   colossal run --nproc_per_node 2 recipes/custom_loop.lua
local colossal = require("colossal")

-- colossal.settings applies the command line's --set overrides.
local cfg = colossal.settings {
  steps = 40, lr = 2e-3, micro_batch_size = 4, seq_len = 64, accumulation_steps = 2,
  n_layer = 2, n_head = 4, n_embd = 128, seed = 42,
}

local env = colossal.launch { device = "auto", seed = cfg.seed }   -- colossalai.launch_from_torch
local data = colossal.data.prepare {
  input = colossal.data.default_corpus(), output = "data/shakespeare", name = "shakespeare",
}
local model = colossal.model.gpt2 {
  n_layer = cfg.n_layer, n_head = cfg.n_head, n_embd = cfg.n_embd, max_seq_len = cfg.seq_len,
}
local optimizer = colossal.optim.hybrid_adam(model, { lr = cfg.lr, betas = { 0.9, 0.95 }, weight_decay = 0.1 })
local scheduler = colossal.lr_scheduler.cosine_annealing_warmup(optimizer, {
  warmup_steps = math.min(5, cfg.steps), total_steps = cfg.steps, eta_min = cfg.lr / 10,
})
local booster = colossal.booster { plugin = colossal.plugin.torch_ddp { bucket_cap_mb = 25 } }
local loader = colossal.data.loader { pattern = data.train, batch_size = cfg.micro_batch_size, seq_len = cfg.seq_len }
model, optimizer, loader, scheduler = booster:boost(model, optimizer, loader, scheduler)

for step = 1, cfg.steps do
  optimizer:zero_grad()
  local loss_sum = 0
  for micro = 1, cfg.accumulation_steps do
    local loss = model(loader:next()) / cfg.accumulation_steps
    if micro < cfg.accumulation_steps then
      local _ <close> = booster:no_sync(model)   -- accumulate locally; reduce on the last
      booster:backward(loss, optimizer)
    else
      booster:backward(loss, optimizer)
    end
    loss_sum = loss_sum + loss:item()
  end
  optimizer:clip_grad_by_norm(1.0)
  local result = optimizer:step()
  local lr = scheduler:get_last_lr()
  scheduler:step()
  if env.rank == 0 and (step == 1 or step % 10 == 0) then
    print(string.format("step %3d | loss %.4f | norm %.3f | lr %.2e", step, loss_sum, result.grad_norm, lr))
  end
end
if env.rank == 0 then
  print(model:generate("KING:", { max_new_tokens = 24, temperature = 0.8, seed = cfg.seed }))
end
