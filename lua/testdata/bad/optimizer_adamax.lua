-- expect: line 7: optimizer.name: must be one of "adamw"
-- An optimizer colossal does not have.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = {
    name = "adamax",
    lr = 1e-3,
  },
  steps = 2,
}
