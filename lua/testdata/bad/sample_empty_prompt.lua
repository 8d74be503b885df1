-- expect: line 8: sample.prompt
-- fixed_bug: SAMPLE does not check the prompt; model:generate fails after training with "colossal.recipe:NNN: model:generate: ..." (no recipe file, no line)
-- An empty sampling prompt.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  sample = { prompt = "", max_new_tokens = 4 },
  steps = 2,
}
