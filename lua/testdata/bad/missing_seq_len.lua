-- expect: line 5: data: needs `seq_len`
-- The data section without a sequence length.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = {
    input = "lua/testdata/corpus",
    micro_batch_size = 2,
  },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
