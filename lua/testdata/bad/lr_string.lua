-- expect: line 8: lr must be a number, got a string
-- A learning rate written as a word.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = {
    name = "adamw",
    lr = "fast",
  },
  steps = 2,
}
