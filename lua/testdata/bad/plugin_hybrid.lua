-- expect: line 7: plugin: booster:boost: hybrid_parallel: tp_size = 2 does not divide the job's 1 process(es)
-- Tensor parallelism over more ranks than the job has.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "hybrid_parallel",
    tp_size = 2,
  },
  steps = 2,
}
