-- expect: line 9: plugin: colossal.plugin.hybrid_parallel: sp_size = 2: only sequence_parallelism_mode "all_to_all" (with enable_sequence_parallelism) takes sp_size > 1
-- Ulysses-style sequence ranks (sp_size) without the all_to_all mode that uses them.
return {
  model = { n_layer = 2, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "hybrid_parallel",
    sp_size = 2,
  },
  steps = 2,
}
