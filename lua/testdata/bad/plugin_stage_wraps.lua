-- expect: line 9: stage = 4294967297 is out of range
-- 2^32 + 1 used to wrap to 1 when cast to int, and ran as stage 1.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "low_level_zero",
    stage = 4294967297,
  },
  steps = 2,
}
