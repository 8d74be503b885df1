-- expect: line 14: accumulation_steps: 3 micro-batches a step do not fill the interleaved pipeline schedule, which takes a multiple of plugin.pp_size (2)
-- The interleaved schedule with a number of micro-batches the stages do not divide.
return {
  model = { n_layer = 4, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "hybrid_parallel",
    pp_size = 2,
    pp_style = "interleaved",
    num_model_chunks = 2,
  },
  steps = 2,
  accumulation_steps = 3,
}
