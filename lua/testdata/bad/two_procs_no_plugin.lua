-- expect: line 4: give a plugin
-- launcher: run --nproc_per_node 2 --master_port PORT
-- fixed_bug: the booster's error is rethrown for `plugin`, which the recipe does not have: "file:?:"; the `return {` line is expected
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
