-- expect: line 8: lr_scheduler.name: must be one of "cosine_annealing_warmup"
-- PyTorch's scheduler name instead of Colossal-AI's.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  lr_scheduler = {
    name = "CosineAnnealingLR",
    total_steps = 2,
  },
  steps = 2,
}
