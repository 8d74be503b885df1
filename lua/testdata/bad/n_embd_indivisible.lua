-- expect: line 7,8: n_head
-- fixed_bug: the config error ("GPT-2 config: n_embd 16 is not a multiple of n_head 3") is rethrown at the `model` line (4), not at the key
-- 16 channels cannot be split into 3 heads.
return {
  model = {
    n_layer = 1,
    n_embd = 16,
    n_head = 3,
    max_seq_len = 16,
  },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
