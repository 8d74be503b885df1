-- colossal.recipe(t[, file]): the standard training loop, in Lua over the
-- imperative API (DESIGN principle 7: Lua describes, C++ executes). Embedded
-- in the binary; `colossal <recipe.lua>` calls it with the table the recipe
-- returns. Every key is checked before any work starts; a mistake names the
-- recipe file, the line of the key and the key.
local colossal = ...

local recipe = {}

-- Where a key is written in the recipe file ("file:line: "). A key the recipe
-- does not write (a missing one) is placed at its parent table, and a missing
-- top-level key at the recipe's `return`.
local function where(file, path)
  if not file then return "" end
  local p, line = path or "", nil
  while true do
    line = colossal._key_line(file, p)
    if line or p == "" then break end
    p = p:match("^(.*)%.[^.]*$") or ""
  end
  return string.format("%s:%s: ", file, line or "?")
end

local function usage_error(file, path, message)
  error({ message = where(file, path) .. (path and (path .. ": ") or "") .. message, code = 2 }, 0)
end

-- An error from a binding, rethrown at the recipe key it comes from (the
-- option the binding names in err.key). One caused by an environment
-- variable (RANK, COLOSSAL_DETERMINISTIC, ...) names the variable and its
-- value, and no recipe key.
local function rethrow(file, section, t, err)
  if type(err) == "table" and err.environment then error(err, 0) end
  local message = type(err) == "table" and err.message or tostring(err)
  local code = type(err) == "table" and err.code or 1
  message = message:gsub("^[^:\n]*:%d+: ", "")
  local key = type(err) == "table" and err.key or nil
  local path = section
  if key and type(t) == "table" and t[key] ~= nil then path = section .. "." .. key end
  error({ message = where(file, path) .. section .. ": " .. message, code = code }, 0)
end

local function call(file, section, t, fn, ...)
  local results = table.pack(pcall(fn, ...))
  if not results[1] then rethrow(file, section, t, results[2]) end
  return table.unpack(results, 2, results.n)
end

-- Checks table `t` (at `path`) against `spec`: key -> {type, default}.
local function check(file, path, t, spec)
  if t == nil then t = {} end
  if type(t) ~= "table" then usage_error(file, path, "must be a table, got a " .. type(t)) end
  local names = {}
  for k in pairs(spec) do names[#names + 1] = k end
  table.sort(names)
  for k, v in pairs(t) do
    local key = path and (path .. "." .. tostring(k)) or tostring(k)
    local s = spec[k]
    if s == nil then
      local best, best_d
      for _, n in ipairs(names) do
        local d = recipe.distance(tostring(k), n)
        if d <= math.max(1, #tostring(k) // 3) and (not best_d or d < best_d) then best, best_d = n, d end
      end
      usage_error(file, key, "unknown key" .. (best and (' (did you mean "' .. best .. '"?)') or "")
        .. "; known: " .. table.concat(names, ", "))
    end
    local want = s[1]
    local got = math.type(v) == "integer" and "integer" or type(v)
    local ok = got == want or (want == "number" and got == "integer") or want == "any"
    if not ok then
      local article = want:match("^[aeiou]") and "an " or "a "
      -- A float where an integer goes says its value (1e3 and 2.5 read alike otherwise).
      local shown = got == "number" and (" " .. tostring(v)) or ""
      usage_error(file, key, "must be " .. article .. want .. ", got " .. (got:match("^[aeiou]") and "an " or "a ")
        .. got .. shown)
    end
    -- NaN slips past every comparison (v < 0 is false) and inf past most:
    -- no recipe number means either.
    if got == "number" and (v ~= v or v == math.huge or v == -math.huge) then
      usage_error(file, key, "must be a finite number, got " .. tostring(v))
    end
    if s.check then
      local why = s.check(v)
      if why then usage_error(file, key, why) end
    end
  end
  local out = {}
  for k, s in pairs(spec) do
    local v = t[k]
    if v == nil then v = s[2] end
    if v == nil and s.required then
      usage_error(file, path, "needs `" .. k .. "`" .. (s.hint and (" (" .. s.hint .. ")") or ""))
    end
    out[k] = v
  end
  return out
end

-- Levenshtein distance, for "did you mean".
function recipe.distance(a, b)
  a, b = a:lower(), b:lower()
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

local function positive(v) if v <= 0 then return "must be positive" end end
local function non_negative(v) if v < 0 then return "must be >= 0" end end
local function one_of(...)
  local allowed = { ... }
  return function(v)
    for _, a in ipairs(allowed) do if v == a then return nil end end
    return 'must be one of "' .. table.concat(allowed, '", "') .. '", got "' .. tostring(v) .. '"'
  end
end

local TOP = {
  model = { "table", required = true },
  data = { "table", required = true },
  optimizer = { "table", required = true },
  lr_scheduler = { "table" },
  plugin = { "table" },
  precision = { "string", "fp32", check = one_of("fp32", "bf16", "fp16") },
  device = { "string", "auto" },
  seed = { "integer", 1337 },
  steps = { "integer", required = true, check = positive, hint = "optimizer steps to train" },
  accumulation_steps = { "integer", 1, check = positive },
  max_norm = { "number", 0, check = non_negative },
  clip_value = { "number", 0, check = non_negative },
  eval = { "table" },
  log = { "table" },
  checkpoint = { "table" },
  sample = { "table" },
  trace = { "table", hint = "{ step = N, file = \"trace.json\" }: a Chrome trace of step N" },
}
local TRACE = {
  step = { "integer", required = true, check = positive },
  file = { "string", "trace.json", check = function(v) if v == "" then return "must not be empty" end end },
}
local DATA = {
  corpus = { "string", check = one_of("shakespeare") },
  input = { "string" },
  name = { "string" },
  output = { "string" },
  train = { "string" },
  val = { "string" },
  micro_batch_size = { "integer", required = true, check = positive },
  seq_len = { "integer", required = true, check = positive },
  shuffle = { "boolean", true },
  packing = { "boolean", true },
  document_attention = { "boolean", true },
  val_fraction = { "number" },
  split = { "string", check = one_of("file", "paragraph", "line") },
  format = { "string", check = one_of("text", "chat") },
  chat_template = { "string", check = one_of("llama3", "llama3.1", "chatml", "qwen2", "qwen2.5") },
  tokenizer = { "string" },
}
local EVAL = { every_steps = { "integer", 0, check = non_negative }, batches = { "integer", 10, check = positive } }
local function non_empty(v) if v == "" then return "must not be empty" end end
local LOG = { every_steps = { "integer", 1, check = positive }, file = { "string", check = non_empty } }
local CHECKPOINT = {
  dir = { "string", required = true, check = non_empty },
  every_steps = { "integer", 0, check = non_negative },
  keep = { "integer", 3, check = non_negative },
  resume = { "boolean", true },
}
local SAMPLE = {
  prompt = { "string", "\n", check = non_empty },
  max_new_tokens = { "integer", 64, check = non_negative },
  temperature = { "number", 0.8, check = non_negative },
  top_k = { "integer", 40, check = non_negative },
}

-- Shallow copy of `t` without `drop` (a section's own keys go to a binding).
local function without(t, drop)
  local out = {}
  for k, v in pairs(t or {}) do if k ~= drop then out[k] = v end end
  return out
end

local function datasets(file, d, m)
  -- "" is a placeholder a recipe leaves for --set (llama_finetune.lua's
  -- train, val, input and tokenizer, as from_pretrained = ""): not given.
  local placeholder = d.train == "" or d.val == ""
  if d.train == "" then d.train = nil end
  if d.val == "" then d.val = nil end
  if d.input == "" then d.input = nil end
  if d.tokenizer == "" then d.tokenizer = nil end
  if d.val and not d.train then
    usage_error(file, "data.val", "is given without data.train (the training shards it goes with)")
  end
  local ways = (d.corpus and 1 or 0) + (d.input and 1 or 0) + ((d.train or d.val) and 1 or 0)
  if ways > 1 then
    usage_error(file, "data", "give exactly one of `corpus` (\"shakespeare\"), `input` (text files "
      .. "to tokenize) or `train` (+ `val`: prepared token shards)")
  end
  -- No data named: the built-in corpus, tokenized on first use.
  if ways == 0 then
    d.corpus = "shakespeare"
    d.placeholder_note = placeholder
  end
  if d.format == "chat" and not d.input then
    usage_error(file, "data.format", "\"chat\" tokenizes conversations: give data.input (JSON Lines "
      .. "files or a folder of *.jsonl); prepared chat shards go in data.train with their .mask files")
  end
  if d.train then return d.train, d.val end
  local name = d.name or d.corpus or "data"
  local input = d.input
  if d.corpus then input = call(file, "data.corpus", d, colossal.data.default_corpus) end
  -- A model from a Hugging Face folder tokenizes its data with the folder's tokenizer.
  local tokenizer = d.tokenizer
  if not tokenizer and m.from_pretrained and m.from_pretrained ~= "" and not d.corpus then
    tokenizer = m.from_pretrained
  end
  if d.format == "chat" and not tokenizer then
    usage_error(file, "data.format", "\"chat\" needs the model's tokenizer, which has the chat template's "
      .. "tokens: set model.from_pretrained (a Hugging Face folder) or data.tokenizer")
  end
  local paths = call(file, d.corpus and "data.corpus" or "data.input", d, colossal.data.prepare, {
    input = input, output = d.output or ("data/" .. name), name = name, val_fraction = d.val_fraction,
    split = d.split, tokenizer = tokenizer, format = d.format, chat_template = d.chat_template,
  })
  return paths.train, paths.val, paths.prepared_now and (d.output or ("data/" .. name)), paths.vocab_size
end

local function human(n)
  if n >= 1e9 then return string.format("%.2fG", n / 1e9) end
  if n >= 1e6 then return string.format("%.1fM", n / 1e6) end
  if n >= 1e3 then return string.format("%.1fk", n / 1e3) end
  return string.format("%.0f", n)
end

-- bench (optional): { steps = N, warmup = W } — `colossal bench`: W + N steps
-- with no evaluation, checkpoints, log file or sample, then one summary line
-- over the last N steps (and a JSON line for scripts).
function recipe.run(t, file, bench)
  local r = check(file, nil, t, TOP)
  local d = check(file, "data", r.data, DATA)
  local ev = check(file, "eval", r.eval, EVAL)
  local lg = check(file, "log", r.log, LOG)
  local ck = r.checkpoint and check(file, "checkpoint", r.checkpoint, CHECKPOINT)
  local sm = r.sample and check(file, "sample", r.sample, SAMPLE)
  local tr = r.trace and check(file, "trace", r.trace, TRACE)
  if bench then
    r.steps = bench.warmup + bench.steps
    ev.every_steps, ck, sm = 0, nil, nil
    tr = bench.trace and { step = bench.warmup + 1, file = bench.trace } or nil
  end
  if tr and tr.step > r.steps then
    usage_error(file, "trace.step", string.format("is %d, past the last step (%d)", tr.step, r.steps))
  end
  if type(r.optimizer.name) ~= "string" or not colossal.optim[r.optimizer.name] then
    usage_error(file, "optimizer.name", "must be one of \"adamw\", \"hybrid_adam\", \"cpu_adam\", \"sgd\"")
  end
  if r.lr_scheduler and (type(r.lr_scheduler.name) ~= "string" or not colossal.lr_scheduler[r.lr_scheduler.name]) then
    usage_error(file, "lr_scheduler.name",
      "must be one of \"cosine_annealing_warmup\", \"linear_warmup\", \"constant\"")
  end
  if r.plugin and (type(r.plugin.name) ~= "string" or not colossal.plugin[r.plugin.name]) then
    local names = {}
    for name in pairs(colossal.plugin) do names[#names + 1] = string.format("%q", name) end
    table.sort(names)
    usage_error(file, "plugin.name", "must be one of " .. table.concat(names, ", "))
  end
  -- model.family picks colossal.model.<family> ("gpt2" when absent); the
  -- rest of the table is that function's options.
  local family = r.model.family or "gpt2"
  if type(family) ~= "string" or family == "family" or not colossal.model[family] then
    usage_error(file, "model.family", 'must be one of "gpt2", "llama", got ' .. string.format("%q", tostring(family)))
  end
  -- A step's tokens are counted in integers (the log, tokens/s): 2^50 a step
  -- is far past any real batch and keeps every count exact.
  local step_tokens = 1.0 * d.micro_batch_size * d.seq_len * r.accumulation_steps
  if step_tokens > 2.0 ^ 50 then
    usage_error(file, "accumulation_steps", string.format("%d micro-batches of %d x %d tokens make "
      .. "%.3g tokens a step, past 2^50", r.accumulation_steps, d.micro_batch_size, d.seq_len,
      step_tokens))
  end
  local model_cfg = without(r.model, "family")
  if math.type(model_cfg.max_seq_len) == "integer" and d.seq_len > model_cfg.max_seq_len then
    usage_error(file, "data.seq_len", string.format("%d is longer than model.max_seq_len (%d)",
      d.seq_len, model_cfg.max_seq_len))
  end

  -- Every binding's options are checked before any work starts: the plugin
  -- (no runtime needed), then the model, optimizer and schedule, and only then
  -- is the data prepared. What the loop needs from the plugin it asks it.
  local plugin = r.plugin and call(file, "plugin", r.plugin, colossal.plugin[r.plugin.name],
    without(r.plugin, "name"))
  local caps = plugin and plugin:capabilities()
      or { owns_precision = false, supports_no_sync = true, clips_by_value = true }
  if caps.owns_precision and r.precision ~= "fp32" then
    usage_error(file, "precision", string.format("%s takes its precision from plugin.precision "
      .. "(as in Colossal-AI); set that instead", caps.name))
  end
  local multiple = caps.pipeline_micro_batch_multiple or 1
  if caps.pipeline and r.accumulation_steps % multiple ~= 0 then
    usage_error(file, "accumulation_steps", string.format("%d micro-batches a step do not fill the "
      .. "interleaved pipeline schedule, which takes a multiple of plugin.pp_size (%d)",
      r.accumulation_steps, multiple))
  end
  -- Colossal-AI's num_microbatches / microbatch_size split the batch handed
  -- to the pipeline; here the recipe's micro-batches feed it, so they agree.
  local n_micro = caps.pipeline_num_micro_batches or 0
  if n_micro > 0 and n_micro ~= r.accumulation_steps then
    usage_error(file, "accumulation_steps", string.format("%d micro-batches a step, but "
      .. "plugin.num_microbatches = %d: the pipeline runs accumulation_steps micro-batches a step; "
      .. "set them equal", r.accumulation_steps, n_micro))
  end
  local micro_size = caps.pipeline_micro_batch_size or 0
  if micro_size > 0 and micro_size ~= d.micro_batch_size then
    usage_error(file, "data.micro_batch_size", string.format("%d, but plugin.microbatch_size = %d: "
      .. "the pipeline's micro-batches are data.micro_batch_size sequences; set them equal",
      d.micro_batch_size, micro_size))
  end
  if not caps.clips_by_value and r.clip_value > 0 then
    usage_error(file, "clip_value", string.format("%s clips by norm only (plugin.max_norm)", caps.name))
  end

  local env = call(file, "device", r, colossal.launch, { device = r.device, seed = r.seed })
  local main = env.rank == 0
  local say = function(...) if main then print(string.format(...)) end end
  local precision = caps.owns_precision and caps.precision or r.precision
  if precision ~= "fp32" and env.device == "cpu" then
    usage_error(file, caps.owns_precision and "plugin.precision" or "precision", string.format(
      "%s needs a CUDA device; this process runs on the CPU (use fp32)", precision))
  end

  -- Where the run writes, checked before any work: an unwritable checkpoint
  -- folder found at the first save would cost every step before it.
  local log_file = lg.file or (ck and (ck.dir .. "/log.jsonl")) or "logs/train.jsonl"
  if ck then
    call(file, "checkpoint.dir", r.checkpoint, colossal.check_writable, ck.dir, { dir = true })
  end
  if main and not bench then
    call(file, lg.file and "log.file" or (ck and "checkpoint.dir") or "log", lg.file and r.log or r.checkpoint,
      colossal.check_writable, log_file)
  end
  local trace_file
  if tr then
    trace_file = env.world_size > 1 and (tr.file:gsub("%.json$", "") .. ".rank" .. env.rank .. ".json") or tr.file
    call(file, "trace.file", r.trace, colossal.check_writable, trace_file)
  end

  local model = call(file, "model", r.model, colossal.model[family], model_cfg)
  local cfg = model:config()
  if d.seq_len > cfg.max_seq_len then
    local why = ""
    if (cfg.sliding_window or 0) > 0 and cfg.sliding_window == cfg.max_seq_len then
      why = ": its sliding_window; longer sequences need sliding-window attention, which this "
        .. "build does not have"
    end
    usage_error(file, "data.seq_len", string.format("%d is longer than the model's context (%d%s)",
      d.seq_len, cfg.max_seq_len, why))
  end
  -- The largest activation of a micro-batch, its logits, must fit one tensor
  -- (2^48 elements), checked before anything of that size is allocated.
  local logits = d.micro_batch_size * 1.0 * d.seq_len * cfg.padded_vocab_size
  if logits > 2.0 ^ 48 then
    usage_error(file, "data.micro_batch_size", string.format(
      "%d sequences of %d tokens over a vocabulary of %d give logits of %.3g elements; the limit "
      .. "is 2^48 = %.3g elements in one tensor", d.micro_batch_size, d.seq_len,
      cfg.padded_vocab_size, logits, 2.0 ^ 48))
  end
  local optimizer = call(file, "optimizer", r.optimizer, colossal.optim[r.optimizer.name], model,
    without(r.optimizer, "name"))
  local scheduler = r.lr_scheduler and call(file, "lr_scheduler", r.lr_scheduler,
    colossal.lr_scheduler[r.lr_scheduler.name], optimizer, without(r.lr_scheduler, "name"))
  local booster = call(file, "plugin", r.plugin, colossal.booster,
    { plugin = plugin, mixed_precision = (not caps.owns_precision) and r.precision or nil })
  local train_pattern, val_pattern, prepared_into, data_vocab = datasets(file, d, r.model)
  -- Token ids past the model's vocabulary would stop the run at step 1's embedding.
  if data_vocab and data_vocab > cfg.vocab_size then
    usage_error(file, "model.vocab_size", string.format("the data's tokenizer has %d tokens, the "
      .. "model's vocabulary %d: token ids up to %d would fall outside it; give the model "
      .. "vocab_size >= %d, or prepare the data with the model's tokenizer", data_vocab,
      cfg.vocab_size, data_vocab - 1, data_vocab))
  end
  if d.placeholder_note then
    say("colossal: data.train is empty (a placeholder for --set data.train=... data.val=...): "
      .. "training on the built-in Shakespeare corpus")
  end
  if prepared_into then say("colossal: tokenized the %s text into %s (first use)", d.corpus or "input", prepared_into) end
  local loader = call(file, "data.train", d, colossal.data.loader, {
    pattern = train_pattern, batch_size = d.micro_batch_size, seq_len = d.seq_len, shuffle = d.shuffle,
    vocab_size = cfg.vocab_size, packing = d.packing, document_attention = d.document_attention,
  })
  -- Packed chat rows attend within each conversation (the loader marks
  -- where they start): Llama-family models, through the fused kernels on a GPU.
  if d.document_attention and d.packing and loader:has_loss_masks() then
    if family ~= "llama" then
      usage_error(file, "data.document_attention", string.format("%s models attend across the conversations "
        .. "packed into a row; set data.document_attention = false (or data.packing = false)", family))
    end
    if env.device ~= "cpu" and precision == "fp32" then
      usage_error(file, "data.document_attention", "attention within the conversations of a packed row runs "
        .. "the fused kernels on a GPU, which take bf16 or fp16: set the precision, or "
        .. "data.document_attention = false (or data.packing = false)")
    end
  end
  -- Boost gives the model its memory: without a plugin, what fails there
  -- (a model larger than the machine) is the model's.
  model, optimizer, loader, scheduler = call(file, r.plugin and "plugin" or "model", r.plugin or r.model,
    booster.boost, booster, model, optimizer, loader, scheduler)

  local start = 0
  if ck and ck.resume then
    local latest = call(file, "checkpoint.dir", r.checkpoint, colossal.checkpoint.latest, ck.dir)
    if latest then
      local t_load = colossal.clock()
      start = call(file, "checkpoint.dir", r.checkpoint, booster.load_checkpoint, booster, latest)
      say("resumed from %s (step %d, %.1f s)", latest, start, colossal.clock() - t_load)
    end
  end

  local n_params = model:num_params()
  local accum, world = r.accumulation_steps, env.world_size
  -- Each data-parallel copy reads its own batch; tensor-parallel ranks share one.
  local tokens_per_step = d.micro_batch_size * d.seq_len * accum * booster:dp_size()
  -- A mixture of experts computes with the experts its router picks only:
  -- the active parameters count, not every expert's.
  local experts = cfg.num_local_experts or 0
  local active = n_params
  if experts > 0 then
    active = n_params - cfg.num_hidden_layers * (experts - cfg.num_experts_per_tok) * 3 * cfg.hidden_size
      * cfg.intermediate_size
  end
  local flops_per_token = 6 * active + 12 * cfg.n_layer * cfg.n_embd * d.seq_len
  local info = colossal.device_info()
  local peak = (precision ~= "fp32") and info.peak_flops_16bit or nil
  local where_ = env.device == "cpu" and "the CPU" or (env.device .. " " .. info.name)
  local moe = experts > 0
      and string.format(", %d experts, %d per token: %s active", experts, cfg.num_experts_per_tok, human(active))
      or ""
  say("colossal: %s %s parameters (%d layers, %d heads, width %d%s) on %s x%d, %s, plugin %s",
    family == "gpt2" and "GPT-2" or (experts > 0 and "Mixtral" or "Llama"), human(n_params), cfg.n_layer, cfg.n_head,
    cfg.n_embd, moe, where_, world, precision, r.plugin and r.plugin.name or "none")
  say("colossal: %d steps of %s tokens (micro-batch %d x %d, accumulation %d)", r.steps,
    human(tokens_per_step), d.micro_batch_size, d.seq_len, accum)

  if not bench then
    say("colossal: every step is logged to %s%s", log_file,
      ck and ck.every_steps > 0 and string.format("; checkpoints every %d steps in %s", ck.every_steps, ck.dir) or "")
  end
  local log = main and not bench and colossal.jsonl(log_file) or nil
  local timed = { seconds = 0, steps = 0, peak = 0 }
  local tty = main and colossal.term.isatty()
  local max_norm = r.max_norm
  local function open_val()
    return call(file, "data.val", d, colossal.data.loader, {
      pattern = val_pattern, batch_size = d.micro_batch_size, seq_len = d.seq_len, shuffle = false,
      prefetch = 0, vocab_size = cfg.vocab_size, packing = d.packing, document_attention = d.document_attention,
    })
  end
  -- A batch the loader refuses (a token id past the model's vocabulary: the
  -- shards of another tokenizer) names the recipe's data key.
  local function next_batch(l, key) return call(file, key, d, l.next, l) end
  -- Every evaluation reads the same first eval.batches batches of the val
  -- split (a fresh, unshuffled loader each time, as llm.c resets its val
  -- loader): val losses compare across steps, and a resumed run's equal an
  -- uninterrupted one's.
  -- With loss masks (chat data) batches count different numbers of targets:
  -- the val loss is then the mean over every counted target, not of the
  -- batches' means.
  local function evaluate()
    if not val_pattern then return nil end
    local val_loader = open_val()
    local sum, counted = 0, 0
    for _ = 1, ev.batches do
      local batch = next_batch(val_loader, "data.val")
      if val_loader:has_loss_masks() then
        sum, counted = sum + model:evaluate(batch) * batch:counted(), counted + batch:counted()
      else
        sum, counted = sum + model:evaluate(batch), counted + 1
      end
    end
    return counted > 0 and sum / counted or 0
  end

  if val_pattern and ev.every_steps > 0 then open_val() end  -- a bad val split fails before step 1

  -- One step's Chrome trace (every rank writes its own file: trace_file, above).
  if tr then
    if tr.step <= start then say("colossal: trace.step %d is before the resumed step %d: no trace", tr.step, start + 1) end
  end

  -- A SIGTERM or SIGINT (a scheduler's preemption, Ctrl-C) now stops the run
  -- at the end of its step, which is saved first; a second one stops it at once.
  colossal.catch_stop_signals()
  local function save(step)
    local t_save = colossal.clock()
    -- A failed save (a full disk) names the recipe's checkpoint.dir; the
    -- step folders already saved stay as they were.
    local path = call(file, "checkpoint.dir", r.checkpoint, booster.save_checkpoint, booster, ck.dir,
      { step = step, keep = ck.keep })
    say("saved %s (%.1f s)", path, colossal.clock() - t_save)
  end

  -- A step's loss is the mean over every target it counts. Without loss
  -- masks every micro-batch counts B x T of them, so that is the mean of the
  -- micro-batches' means (loss / accum). With masks (chat data) they count
  -- different numbers: micro-batch i's mean is weighted by counted_i / N, N
  -- the step's count over the data-parallel copies, times dp because the
  -- plugins average gradients over the copies (Hugging Face's
  -- num_items_in_batch). Every rank of a copy (its tp and pp ranks) reads
  -- the same batches, so the world's sum counts each copy world / dp times.
  -- Returns the weights (nil without masks) and what turns the step's
  -- weighted loss into this rank's own token mean (the loss it logs).
  local masked = loader:has_loss_masks()
  local function step_weights(batches)
    if not masked then return nil end
    local dp, mine = booster:dp_size(), 0
    for _, b in ipairs(batches) do mine = mine + b:counted() end
    local n = colossal.all_reduce(mine) // (world // dp)
    local weights = {}
    for i, b in ipairs(batches) do weights[i] = n > 0 and dp * b:counted() / n or 0 end
    return weights, mine > 0 and n / (dp * mine) or 0
  end

  local first_loss, last_loss, stopped_by
  local t0 = colossal.clock()
  for step = start + 1, r.steps do
    local tracing = tr and step == tr.step
    if tracing then colossal.trace_start() end
    optimizer:zero_grad()
    local loss_sum = 0
    local batches = {}
    for micro = 1, accum do batches[micro] = next_batch(loader, "data.train") end
    local weights, weight_to_local = step_weights(batches)
    if caps.pipeline then
      -- The step's micro-batches through the stages (1F1B); the step's loss back.
      loss_sum = booster:execute_pipeline(model, batches, weights)
    end
    for micro = 1, caps.pipeline and 0 or accum do
      local loss = weights and model(batches[micro]) * weights[micro] or model(batches[micro]) / accum
      if micro < accum and caps.supports_no_sync then
        local _ <close> = booster:no_sync(model)
        booster:backward(loss, optimizer)
      else
        booster:backward(loss, optimizer)
      end
      loss_sum = loss_sum + loss:item()
    end
    if weights then loss_sum = loss_sum * weight_to_local end
    if r.clip_value > 0 then optimizer:clip_grad_by_value(r.clip_value) end
    if max_norm > 0 then optimizer:clip_grad_by_norm(max_norm) end
    local result = optimizer:step()
    local lr = scheduler and scheduler:get_last_lr() or optimizer:get_lr()
    if scheduler then scheduler:step() end
    if tracing then
      colossal.trace_stop(trace_file)  -- waits for the step's device work
      say("colossal: step %d's trace is in %s (chrome://tracing or ui.perfetto.dev)", step, trace_file)
    end
    local t1 = colossal.clock()
    local dt = t1 - t0
    t0 = t1
    first_loss = first_loss or loss_sum
    last_loss = loss_sum
    local tps = tokens_per_step / dt
    local mem = colossal.memory()
    if bench and step > start + bench.warmup then
      timed.seconds, timed.steps = timed.seconds + dt, timed.steps + 1
    end
    -- The bench's peak memory is the steady state's, not boost's one-off peak.
    if bench and step == start + bench.warmup then colossal.reset_peak_memory() end
    local line = {
      step = step, loss = loss_sum, lr = lr, grad_norm = result.grad_norm, tokens_per_s = tps,
      ms = dt * 1000, skipped = result.skipped, loss_scale = result.loss_scale,
      memory = env.device == "cpu" and mem.max_rss or mem.peak,
    }
    if peak then line.mfu = flops_per_token * tps / (peak * world) end
    if ev.every_steps > 0 and (step % ev.every_steps == 0 or step == r.steps) then
      line.val_loss = evaluate()
    end
    if main then
      if log then log:write(line) end
      if step % lg.every_steps == 0 or step == r.steps or step == start + 1 or line.val_loss then
        if tty then colossal.term.write("\r\27[K") end
        print(string.format("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %s tok/s | %.0f ms | mfu %s | mem %s%s%s",
          step, r.steps, loss_sum, lr, result.grad_norm, human(tps), dt * 1000,
          line.mfu and string.format("%.1f%%", 100 * line.mfu) or "-", human(line.memory) .. "B",
          line.val_loss and string.format(" | val %.4f", line.val_loss) or "",
          result.skipped and " | skipped (overflow)" or ""))
      elseif tty then
        local width = 30
        local done = math.floor(width * step / r.steps)
        colossal.term.write(string.format("\r[%s%s] %d/%d loss %.4f", string.rep("#", done),
          string.rep(".", width - done), step, r.steps, loss_sum))
      end
    end
    local saved = ck and ck.every_steps > 0 and (step % ck.every_steps == 0 or step == r.steps)
    if saved then save(step) end
    -- Every rank agrees on the step to stop at (a collective): each saw the
    -- signal at its own moment.
    stopped_by = colossal.stop_requested()
    if stopped_by then
      if ck and not saved then
        save(step)
        saved = true
      end
      say("colossal: stopped by %s after step %d of %d; %s", stopped_by, step, r.steps,
        saved and "the same command resumes from there" or "nothing saved (the recipe has no checkpoint)")
      break
    end
    t0 = colossal.clock()  -- evaluation and saving do not count as training time
  end
  if stopped_by then return { stopped_by = stopped_by } end
  if first_loss then say("loss %.4f -> %.4f over steps %d..%d", first_loss, last_loss, start + 1, r.steps) end
  -- Every rank's own peak (a scaling table takes the maximum over ranks).
  if bench and world > 1 and timed.steps > 0 then
    local mem = colossal.memory()
    print(string.format('{"bench_rank": %d, "peak_memory_bytes": %.0f}', env.rank,
      env.device == "cpu" and mem.max_rss or mem.peak))
  end
  if bench and main and timed.steps > 0 then
    local mem = colossal.memory()
    local ms = 1000 * timed.seconds / timed.steps
    local tps = tokens_per_step * timed.steps / timed.seconds
    local mfu = peak and flops_per_token * tps / (peak * world) or nil
    local memory = env.device == "cpu" and mem.max_rss or mem.peak
    -- Offloaded state (Gemini's host chunks, ZeRO's cpu_offload) lives in
    -- pinned host memory: its peak beside the device's.
    local pinned = mem.pinned_peak > 0
        and string.format(", pinned host peak %sB", human(mem.pinned_peak)) or ""
    print(string.format("bench: %d steps after %d warm-up: %.1f ms/step, %s tokens/s, MFU %s, peak memory %sB%s (%s, %d x %s)",
      timed.steps, bench.warmup, ms, human(tps), mfu and string.format("%.1f%%", 100 * mfu) or "-",
      human(memory), pinned, precision, world, where_))
    print(string.format('{"bench": true, "steps": %d, "ms_per_step": %.3f, "tokens_per_s": %.1f, "mfu": %s, "peak_memory_bytes": %.0f, "pinned_peak_bytes": %.0f, "world_size": %d}',
      timed.steps, ms, tps, mfu and string.format("%.4f", mfu) or "null", memory, mem.pinned_peak, world))
  end
  -- Every rank generates (the same tokens, from the same seed): a plugin that
  -- splits or shards the model runs collectives in each forward. Rank 0 prints.
  if sm then
    local text = call(file, "sample", r.sample, model.generate, model, sm.prompt, {
      max_new_tokens = sm.max_new_tokens, temperature = sm.temperature, top_k = sm.top_k, seed = r.seed,
      tokenizer = d.tokenizer })   -- the data's tokenizer when the recipe names one
    if main then
      print("--- sample ---")
      print(text)
      print("--------------")
    end
  end
  return { first_loss = first_loss, last_loss = last_loss, steps = r.steps - start }
end

return recipe
