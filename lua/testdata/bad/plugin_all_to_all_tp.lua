-- expect: line 10: plugin: colossal.plugin.hybrid_parallel: sequence_parallelism_mode = "all_to_all" works with tp_size 1 and pp_size 1 yet
-- Ulysses sequence parallelism combined with tensor parallelism, which is not built.
return {
  model = { n_layer = 2, n_head = 4, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "hybrid_parallel",
    enable_sequence_parallelism = true,
    sequence_parallelism_mode = "all_to_all",
    sp_size = 2,
    tp_size = 2,
  },
  steps = 2,
}
