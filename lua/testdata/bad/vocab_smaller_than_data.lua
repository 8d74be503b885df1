-- expect: line 5: model.vocab_size: the data's tokenizer has 50257 tokens
-- A model vocabulary smaller than the tokenizer the data was prepared with:
-- it used to stop at step 1's embedding, naming no key.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16, vocab_size = 100 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
