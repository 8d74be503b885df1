-- expect: line 7: total_steps is required
-- A cosine schedule without its length.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  lr_scheduler = { name = "cosine_annealing_warmup", warmup_steps = 1 },
  steps = 2,
}
