-- expect: line 7: plugin: colossal.plugin.hybrid_parallel: num_model_chunks = 1: pp_style "interleaved" needs 2 or more model chunks
-- The interleaved schedule left at one model chunk per stage.
return {
  model = { n_layer = 4, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "hybrid_parallel",
    pp_size = 2,
    pp_style = "interleaved",
  },
  steps = 2,
}
