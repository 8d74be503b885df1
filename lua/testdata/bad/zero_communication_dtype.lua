-- expect: line 10: communication_dtype
-- Colossal-AI's communication_dtype takes a torch dtype; colossal's names are "fp32", "bf16", "fp16".
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "low_level_zero",
    stage = 2,
    communication_dtype = "torch.float16",
  },
  steps = 2,
}
