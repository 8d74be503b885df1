-- A recipe with a typo on line 4 (a missing comma).
return {
  model = { preset = "gpt2" },
  optimizer = { name = "adamw" lr = 6e-4 },
}
