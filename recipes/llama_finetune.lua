-- Fine-tune a Llama-family model (Llama 2/3, TinyLlama, Mistral, Qwen2/Qwen2.5) from a Hugging Face
-- directory (config.json + model.safetensors), with ZeRO stage 2.
--
--   ./colossal recipes/llama_finetune.lua                    a tiny random Llama (CPU) or
--                                                            a Llama-3.2-1B-shaped one (GPU)
--   ./colossal recipes/llama_finetune.lua --set model.from_pretrained=/models/Llama-3.2-1B \
--       --set data.train='data/mine/*_train_*.bin' --set data.val='data/mine/*_val_*.bin'
--
-- from_pretrained = "" trains the model described here from random weights.
-- With a directory, its config.json fixes the architecture
-- (this table's sizes are then not used) and its weights replace the random
-- ones; prepare the text with the model's own tokenizer first:
--   colossal data prepare --tokenizer /models/Llama-3.2-1B --input my.txt --output data/mine
-- Without a directory the recipe trains the model it describes below on the
-- built-in Shakespeare corpus (GPT-2's tokenizer: the vocabulary covers it).
-- Chat fine-tuning (SFT): conversations in JSON Lines, one a line,
--   {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}
-- are rendered with the folder's chat template (Llama 3's, 3.1's, Qwen2's, Qwen2.5's) and
-- the loss counts the assistant's replies only:
--   ./colossal recipes/llama_finetune.lua --set model.from_pretrained=/models/Qwen2.5-0.5B-Instruct \
--       --set data.input=chats.jsonl --set data.format=chat
-- Checkpoints are Hugging Face directories: transformers loads
-- checkpoints/llama_finetune/step_N directly (as LlamaForCausalLM, or the
-- folder's own Mistral/Qwen2 class). On a GPU, a Qwen2.5 of random weights:
--   --set model.preset=qwen2.5-0.5b
local colossal = require("colossal")
local env = colossal.env()
local gpu = env.device ~= "cpu"

return {
  device = "auto",
  seed = 1337,

  model = gpu and { family = "llama", from_pretrained = "", preset = "llama3.2-1b",
                    max_position_embeddings = 2048, checkpoint_ratio = 1.0 }
      or { family = "llama", from_pretrained = "",  -- tiny: 4 layers, 128 wide, grouped-query attention
           vocab_size = 50257, hidden_size = 128, intermediate_size = 344,
           num_hidden_layers = 4, num_attention_heads = 4, num_key_value_heads = 2,
           max_position_embeddings = 256, rms_norm_eps = 1e-5, rope_theta = 10000.0,
           tie_word_embeddings = true },

  data = {
    -- Placeholders for --set: prepared token shards of your own (globs), or
    -- text / chat files to tokenize with the model folder's tokenizer on first
    -- use (`input`; format = "chat" for JSON Lines conversations). Empty, the
    -- recipe trains on the built-in Shakespeare corpus.
    train = "", val = "", input = "",
    format = "text",
    tokenizer = "",   -- for `input`: a model folder or tokenizer file; "": from_pretrained's
    -- true: rows are windows of the token stream (conversations packed back to
    -- back); false: one conversation a row, padded (chat data; Colossal-AI's
    -- SFT pads the same way). Either way a conversation attends to itself
    -- only: in packed rows its positions start at 0 and attention stops at its
    -- edges (document_attention; false lets a row attend across them).
    packing = true,
    document_attention = true,
    micro_batch_size = gpu and 4 or 8,
    seq_len = gpu and 2048 or 128,
  },

  plugin = {
    name = "low_level_zero",
    stage = 2,
    max_norm = 1.0,
    precision = gpu and "bf16" or "fp32",
  },

  optimizer = {
    name = "hybrid_adam",
    lr = gpu and 2e-5 or 2e-3,        -- fine-tuning lr on a GPU; the tiny model trains from scratch
    betas = { 0.9, 0.95 },
    eps = 1e-8,
    weight_decay = 0.0,
    adamw_mode = true,
  },

  lr_scheduler = {
    name = "cosine_annealing_warmup",
    warmup_steps = gpu and 50 or 20,
    total_steps = gpu and 1000 or 200,
    eta_min = gpu and 2e-6 or 2e-4,
  },

  steps = gpu and 1000 or 200,
  -- Micro-batches a step. With chat data a step's loss is the mean over every
  -- target it counts (the replies' tokens), however they fall into micro-batches.
  accumulation_steps = 1,
  eval = { every_steps = gpu and 250 or 50, batches = gpu and 10 or 4 },
  log = { every_steps = 10 },
  checkpoint = { dir = "checkpoints/llama_finetune", every_steps = gpu and 500 or 100, keep = 2 },
  sample = { prompt = "ROMEO:", max_new_tokens = 48, temperature = 0.8, top_k = 40 },
}
