-- expect: line 8: log.file: cannot make the folder for lua/testdata/corpus/doc1.txt/train.jsonl
-- A log file that cannot be written, named before the model is built.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
  log = { file = "lua/testdata/corpus/doc1.txt/train.jsonl" },
}
