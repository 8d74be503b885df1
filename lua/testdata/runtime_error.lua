-- Fails while running (line 3).
local plugin = nil
return { stage = plugin.stage }
