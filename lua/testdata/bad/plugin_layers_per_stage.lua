-- expect: line 10: plugin: colossal.plugin.hybrid_parallel: num_layers_per_stage has 3 entries; pp_size 2 x 1 model chunks take 2 (one per virtual stage: stage s's chunk c is entry c * pp_size + s)
-- num_layers_per_stage with more entries than pipeline stages.
return {
  model = { n_layer = 4, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "hybrid_parallel",
    pp_size = 2,
    num_layers_per_stage = { 1, 1, 2 },
  },
  steps = 2,
  accumulation_steps = 2,
}
