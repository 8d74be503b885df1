-- A tiny ZeRO-2 run for cli_test: seconds on the CPU, checkpoints every 2 steps.
return {
  device = "cpu",
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "corpus", name = "tiny", micro_batch_size = 2, seq_len = 8, val_fraction = 0.2 },
  plugin = { name = "low_level_zero", stage = 2, max_norm = 1.0 },
  optimizer = { name = "hybrid_adam", lr = 1e-2, weight_decay = 0.1 },
  lr_scheduler = { name = "cosine_annealing_warmup", warmup_steps = 2, total_steps = 8, eta_min = 1e-3 },
  steps = 4,
  accumulation_steps = 2,
  eval = { every_steps = 2, batches = 1 },
  checkpoint = { dir = "checkpoints/tiny", every_steps = 2, keep = 2 },
}
