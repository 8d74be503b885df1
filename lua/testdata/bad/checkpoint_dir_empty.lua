-- expect: line 8: checkpoint.dir: must not be empty
-- An empty folder name (a variable that was never set, concatenated).
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
  checkpoint = { dir = "" },
}
