-- expect: line 6: the limit is 2^48
-- A micro-batch whose logits would not fit one tensor.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 128 },
  data = {
    micro_batch_size = 100000000,
    seq_len = 128,
  },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 10,
}
