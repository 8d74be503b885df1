-- expect: line 8: bf16 needs a CUDA device
-- fixed_bug: the booster's error is rethrown for `plugin`, which this recipe does not have: "file:?:" instead of the `precision` line
-- bf16 on one process without a plugin, on a machine without a GPU.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  precision = "bf16",
  steps = 2,
}
