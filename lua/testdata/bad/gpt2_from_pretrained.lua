-- expect: line 6: colossal.model.gpt2: unknown option 'from_pretrained'
-- GPT-2 takes no from_pretrained (booster:load_model loads weights): refused at the key,
-- empty or not.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16,
    from_pretrained = "" },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
