-- expect: line 7: accumulation_steps: 9223372036854775807 micro-batches
-- math.maxinteger micro-batches: the step's token count overflowed to a
-- negative number and the run never finished its first step.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  accumulation_steps = math.maxinteger,
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
