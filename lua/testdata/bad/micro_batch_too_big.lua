-- expect: line 6,7: fewer than one global batch
-- fixed_bug: the loader's FailedPrecondition maps to exit code 1 (lua_util.cc IsUsageCode omits kFailedPrecondition, though lua_util.h says it gives 2)
-- A micro-batch larger than the whole dataset.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = {
    input = "lua/testdata/corpus", micro_batch_size = 4096,
    seq_len = 8,
  },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
