-- expect: line 4: device
-- Asks for a GPU (the test runs on the CPU; --set device=... elsewhere).
return {
  device = "cuda:7",
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
