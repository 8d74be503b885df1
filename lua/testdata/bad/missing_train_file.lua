-- expect: line 6: no shards matched the pattern 'nope/*.bin'
-- Token shards that do not exist (a wrong folder).
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = {
    train = "nope/*.bin",
    micro_batch_size = 2,
    seq_len = 8,
  },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
