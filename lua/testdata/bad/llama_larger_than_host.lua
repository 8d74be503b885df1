-- expect: line 6: model: materializing
-- code: 1
-- A Llama of ~800G parameters with no plugin: boost cannot give it memory on
-- any machine, and the failure is the model's (there is no plugin: key).
return {
  model = { family = "llama", vocab_size = 50304, hidden_size = 8192, intermediate_size = 28672,
    num_hidden_layers = 1000, num_attention_heads = 64, num_key_value_heads = 8 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 1, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 1,
}
