-- expect: line none: --set steps=3: bench runs --warmup + --steps steps (5 + 20); use --steps N
-- launcher: bench
-- args: --set steps=3
-- bench sets the step count itself: a --set steps is refused rather than
-- silently replaced (the run would have timed 25 steps, not 3).
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
