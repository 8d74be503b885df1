-- expect: line 7: lr must be >= 0 (a finite float32), got 1e+300
-- 1e300 is a finite double but infinite as the float the kernels take; it
-- used to pass every check and stop the run after step 1's backward.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e300 },
  steps = 2,
}
