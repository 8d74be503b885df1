-- expect: line 11: eta_min (0.01) is above the base lr of group 0 (0.001)
-- The schedule's floor above the optimizer's peak: the error points at
-- eta_min's line and names it as the recipe does (not nn's field name).
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  lr_scheduler = {
    name = "cosine_annealing_warmup",
    total_steps = 10,
    eta_min = 1e-2,
  },
  steps = 2,
}
