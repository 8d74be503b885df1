-- expect: line 9: stage must be 1 or 2
-- ZeRO stage 3 (Gemini's), which low_level_zero does not do.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "low_level_zero",
    stage = 3,
  },
  steps = 2,
}
