-- expect: line 9: placement_policy must be "cuda", "cpu", "static" or "auto"
-- A placement Gemini does not have.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "gemini",
    placement_policy = "gpu",
  },
  steps = 2,
}
