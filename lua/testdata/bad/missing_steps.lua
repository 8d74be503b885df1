-- expect: line 4: needs `steps`
-- fixed_bug: a missing top-level key is reported as "file:?:" (no line); the `return {` line is expected
-- The number of steps forgotten.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
}
