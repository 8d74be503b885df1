-- expect: line 10: unknown option 'total_steps'
-- A constant schedule has no length: total_steps there is a mistake (it
-- decays nothing), named as an unknown option.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  lr_scheduler = {
    name = "constant",
    total_steps = 10,
  },
  steps = 2,
}
