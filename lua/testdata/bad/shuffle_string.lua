-- expect: line 9: data.shuffle: must be a boolean, got a string
-- "yes" for a boolean.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = {
    input = "lua/testdata/corpus",
    micro_batch_size = 2,
    seq_len = 8,
    shuffle = "yes",
  },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
