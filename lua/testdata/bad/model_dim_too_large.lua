-- expect: line 5: the limit is 2^31 - 1
-- A vocabulary beyond the int32 the kernels take.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16,
    vocab_size = 4294967296 },
  data = { micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 10,
}
