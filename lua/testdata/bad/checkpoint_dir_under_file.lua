-- expect: line 10: checkpoint.dir: cannot make the folder lua/testdata/corpus/doc1.txt/run
-- A checkpoint folder that cannot be made (here: below a file) used to be
-- found at the first save, after every step before it had run.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
  checkpoint = {
    dir = "lua/testdata/corpus/doc1.txt/run",
    every_steps = 1000,
  },
}
