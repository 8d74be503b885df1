-- expect: line 8: data.seq_len: 32 is longer than model.max_seq_len (16)
-- A sequence longer than the model's context.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = {
    input = "lua/testdata/corpus",
    micro_batch_size = 2,
    seq_len = 32,
  },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
