-- expect: line none: --set optimizer.lrr: the recipe has no key 'optimizer.lrr'; did you mean "lr"?
-- args: --set optimizer.lrr=3e-4
-- A valid recipe; the mistake is a misspelt key on the command line.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
