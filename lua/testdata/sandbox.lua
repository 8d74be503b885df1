-- What a recipe can see: the colossal module, no io/os.
local colossal = require("colossal")
local env = colossal.env()
return {
  version = colossal.version,
  rank = env.rank,
  world_size = env.world_size,
  local_rank = env.local_rank,
  device = env.device,
  has_io = io ~= nil,
  has_os = os ~= nil,
  has_dofile = dofile ~= nil,
  nested = { lr = 1e-3, steps = 10, name = "x", on = false, betas = { 0.9, 0.95 } },
}
