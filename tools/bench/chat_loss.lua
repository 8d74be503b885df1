-- The losses of the first batches of prepared chat shards, in file order
-- (shuffle off), as JSON lines: tools/bench/check_chat_loss.py computes the
-- same batches' masked loss with transformers and compares.
--
--   colossal tools/bench/chat_loss.lua --set model=DIR --set pattern='sft/*_train_*.bin' \
--       [--set packing=false] [--set batches=4] [--set micro_batch_size=2] [--set seq_len=64]
--       [--set document_attention=true] [--set precision=bf16]
local colossal = require("colossal")
local cfg = colossal.settings {
  model = "", pattern = "", packing = true, batches = 4, micro_batch_size = 2, seq_len = 64,
  document_attention = false, precision = "fp32",
}
colossal.launch { device = "auto", seed = 1 }
local model = colossal.model.llama { from_pretrained = cfg.model }
local optimizer = colossal.optim.sgd(model, { lr = 1e-3 })   -- never stepped
local booster = colossal.booster { mixed_precision = cfg.precision }
local loader = colossal.data.loader {
  pattern = cfg.pattern, batch_size = cfg.micro_batch_size, seq_len = cfg.seq_len, shuffle = false,
  packing = cfg.packing, document_attention = cfg.document_attention,
}
model, optimizer, loader = booster:boost(model, optimizer, loader)
for b = 1, cfg.batches do
  print(string.format('{"batch": %d, "loss": %.9g}', b, model:evaluate(loader:next())))
end
