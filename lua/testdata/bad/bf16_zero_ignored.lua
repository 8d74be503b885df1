-- expect: line 9: precision
-- fixed_bug: with low_level_zero the top-level `precision` is silently ignored (the plugin's own precision decides) and the run trains fp32 with exit 0
-- bf16 for a ZeRO run, set where the other plugins take it.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = { name = "low_level_zero", stage = 2 },
  precision = "bf16",
  steps = 2,
}
