-- expect: line 6: optimizer.name: must be one of
-- fixed_bug: colossal._key_line does not stop at the end of the `optimizer` table and points at lr_scheduler's `name` (line 8)
-- The optimizer's name forgotten.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  optimizer = { lr = 1e-3, weight_decay = 0.1 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  lr_scheduler = { name = "constant" },
  steps = 2,
}
