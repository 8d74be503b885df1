return 42  -- a recipe returns a table (or nothing)
