-- expect: line 9: bf16 needs a CUDA device
-- fixed_bug: reported at the `plugin` line (the section the booster error is rethrown for), not at `precision`
-- bf16 mixed precision on a machine without a GPU.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = { name = "torch_ddp" },
  precision = "bf16",
  steps = 2,
}
