-- expect: line 8: data loader: token id 60000 at token 20 of shard 'lua/testdata/bad/other_tokenizer_train_000000.bin'
-- code: 2
-- Shards of another tokenizer (an id past GPT-2's 50257): the loader refuses
-- the batch at the recipe's data line; on a GPU the embedding would otherwise
-- have written NaN rows and the run gone on.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { train = "lua/testdata/bad/other_tokenizer_train_*.bin", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 4,
}
