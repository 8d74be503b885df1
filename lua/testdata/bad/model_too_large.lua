-- expect: line 5,6: the limit is 2^48
-- A model beyond what one parameter buffer can hold (5.2e15 parameters):
-- refused before any allocation, naming the limit.
return {
  model = { n_layer = 100000, n_head = 4, n_embd = 65536,
    max_seq_len = 128 },
  data = { micro_batch_size = 8, seq_len = 128 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 10,
}
