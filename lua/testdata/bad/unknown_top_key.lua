-- expect: line 6: optimiser: unknown key (did you mean "optimizer"?)
-- British spelling of a top-level section.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimiser = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
