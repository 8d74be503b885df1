-- expect: line 7: no shards matched the pattern 'nope/val_*.bin'
-- A validation pattern that matches nothing (found at the first evaluation).
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = {
    train = "data/data/data_train_*.bin",
    val = "nope/val_*.bin",
    micro_batch_size = 2,
    seq_len = 8,
  },
  optimizer = { name = "adamw", lr = 1e-3 },
  eval = { every_steps = 1, batches = 1 },
  steps = 2,
}
