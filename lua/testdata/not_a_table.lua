-- Forgets to return the table.
local recipe = { model = { preset = "gpt2" } }
