-- expect: line 7: colossal.model.llama: from_pretrained is empty and nothing else describes the model
-- A Llama whose folder never arrived (`--set model.from_pretrained=$DIR` with DIR unset):
-- it used to mean Llama-2-7B's defaults and fail at boost, blamed on the plugin.
return {
  model = {
    family = "llama",
    from_pretrained = "",
  },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
