-- expect: line 7: no_such_folder
-- fixed_bug: prepare errors are rethrown for `data` (line 5), not `data.input`
-- Text to tokenize that does not exist.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = {
    input = "lua/testdata/no_such_folder",
    output = "data/no_such_folder",
    micro_batch_size = 2,
    seq_len = 8,
  },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
