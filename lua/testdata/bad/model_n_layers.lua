-- expect: line 5: unknown option 'n_layers'; did you mean "n_layer"?
-- HF's config name (n_layers) instead of colossal's (n_layer).
return {
  model = {
    n_layers = 1, n_head = 2, n_embd = 16, max_seq_len = 16,
  },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
