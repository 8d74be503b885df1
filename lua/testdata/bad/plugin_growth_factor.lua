-- expect: line 12: growth_factor must be > 1, got 0.5
-- fp16 loss scaling that would shrink the scale on growth, checked at any
-- precision and pointed at its line (the loss scaler's own check names it).
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "low_level_zero",
    stage = 1,
    initial_scale = 1024,
    growth_factor = 0.5,
  },
  steps = 2,
}
