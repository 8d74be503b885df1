-- expect: line 6: data.val: is given without data.train
-- Validation shards without the training shards they go with (train left empty, as a placeholder).
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { train = "", micro_batch_size = 2, seq_len = 8,
    val = "data/mine/*_val_*.bin" },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
