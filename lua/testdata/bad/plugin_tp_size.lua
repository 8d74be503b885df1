-- expect: line 9: unknown option 'tp_size'
-- HybridParallelPlugin's tensor-parallel size on the ZeRO plugin.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "low_level_zero",
    tp_size = 2,
    stage = 1,
  },
  steps = 2,
}
