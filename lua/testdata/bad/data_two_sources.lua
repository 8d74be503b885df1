-- expect: line 5: data: give exactly one of
-- Both the built-in corpus and an input folder.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = {
    corpus = "shakespeare",
    input = "lua/testdata/corpus",
    micro_batch_size = 2,
    seq_len = 8,
  },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
