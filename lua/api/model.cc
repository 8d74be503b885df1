// colossal.model: GPT-2 and Llama models, the loss of a batch, evaluation and
// sampling.
//
//   local model = colossal.model.gpt2{ preset = "gpt2", checkpoint_ratio = 0.5 }
//   local model = colossal.model.gpt2{ n_layer = 4, n_head = 4, n_embd = 128, max_seq_len = 128 }
//   local model = colossal.model.llama{ preset = "llama3.2-1b" }
//   local model = colossal.model.llama{ from_pretrained = "path/to/hf_dir" }   -- config + weights
//   local model = colossal.model.llama{ hidden_size = 256, num_hidden_layers = 2, ... }
//   local loss = model(batch)            -- forward + fused cross-entropy; loss:item()
//   booster:backward(loss / accumulation_steps, optimizer)
//   -- with loss masks (chat data) weight by counted targets instead, so the
//   -- step's loss is the mean over all of them: loss * (batch:counted() / step_counted)
//   local v = model:evaluate(batch)      -- mean loss, no backward
//   print(model:generate("To be", { max_new_tokens = 32, temperature = 0.8 }))
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "io/tokenizer/load_tokenizer.h"
#include "io/tokenizer/text_tokenizer.h"
#include "lua/api/generation.h"
#include "lua/api/lua_util.h"
#include "lua/api/objects.h"
#include "nn/layers/cross_entropy.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/models/llama/config_json.h"
#include "nn/models/llama/llama.h"
#include "parallel/booster/pipeline.h"
#include "parallel/checkpoint/run_checkpoint.h"

namespace colossal::lua {

core::Tensor ToDevice(lua_State* L, Runtime& rt, const core::Tensor& host) {
  absl::StatusOr<core::Tensor> t = host.to(rt.device, rt.ctx->compute_stream());
  ThrowIfError(L, "copying the batch to the device", t.status());
  return *std::move(t);
}

std::shared_ptr<const nn::Documents> BatchDocuments(lua_State* L, Runtime& rt, const Batch& batch) {
  if (!batch.batch.positions.defined()) return nullptr;
  absl::StatusOr<std::shared_ptr<const nn::Documents>> docs =
      nn::Documents::from_positions(*rt.ctx, batch.batch.positions);
  ThrowIfError(L, "the batch's documents", docs.status());
  return *std::move(docs);
}

namespace {

// colossal.model.gpt2{...} -> Model
int Gpt2(lua_State* L) {
  OptionTable o(L, 1, "colossal.model.gpt2");
  nn::GPT2Config config;
  if (o.has("preset")) {
    absl::StatusOr<nn::GPT2Config> preset = nn::GPT2Config::preset(o.string("preset", ""));
    if (!preset.ok()) o.fail("preset", preset.status().message());
    config = *preset;
  }
  config.n_layer = o.integer("n_layer", config.n_layer);
  config.n_head = o.integer("n_head", config.n_head);
  config.n_embd = o.integer("n_embd", config.n_embd);
  config.vocab_size = o.integer("vocab_size", config.vocab_size);
  config.max_seq_len = o.integer("max_seq_len", config.max_seq_len);
  config.padded_vocab_multiple = o.integer("padded_vocab_multiple", config.padded_vocab_multiple);
  config.checkpoint_ratio = o.number("checkpoint_ratio", config.checkpoint_ratio);
  config.embd_pdrop = o.number("embd_pdrop", config.embd_pdrop);    // Hugging Face's names
  config.resid_pdrop = o.number("resid_pdrop", config.resid_pdrop);
  config.attn_pdrop = o.number("attn_pdrop", config.attn_pdrop);    // rejected when > 0
  const std::string init = o.string("init", "gpt2");
  const int64_t seed = o.integer("seed", -1);
  o.finish();
  if (init != "gpt2") o.fail("init", absl::StrCat("must be \"gpt2\" (GPT-2's initialisation), got \"", init, "\""));
  ThrowIfError(L, "colossal.model.gpt2", config.validate());
  std::shared_ptr<Runtime> rt = GetRuntime(L);
  auto model = std::make_shared<Model>();
  model->rt = rt;
  // Declared only: the booster (or the first use without one) gives it memory.
  absl::StatusOr<std::unique_ptr<nn::GPT2>> net = nn::GPT2::declare(config, core::DType::kF32);
  ThrowIfError(L, "colossal.model.gpt2", net.status());
  model->net = *std::move(net);
  // Every rank draws the same weights from the same seed (the plugins also
  // broadcast rank 0's).
  model->seed = seed >= 0 ? static_cast<uint64_t>(seed) : rt->seed;
  PushHandle(L, std::move(model));
  return 1;
}

// colossal.model.llama{...} -> Model: a preset, a Hugging Face directory
// (from_pretrained: its config.json now, its weights once the model has
// memory) or fields, with Hugging Face LlamaConfig's names; fields override
// the preset's or the directory's.
int Llama(lua_State* L) {
  OptionTable o(L, 1, "colossal.model.llama");
  nn::LlamaConfig config;
  const std::string pretrained = o.string("from_pretrained", "");
  // from_pretrained = "" (a recipe's placeholder for --set) means none; with
  // a directory, its config.json replaces the preset.
  if (o.has("preset") && pretrained.empty()) {
    absl::StatusOr<nn::LlamaConfig> preset = nn::LlamaConfig::preset(o.string("preset", ""));
    if (!preset.ok()) o.fail("preset", preset.status().message());
    config = *preset;
  }
  if (!pretrained.empty()) {
    const std::string path = pretrained + "/config.json";
    absl::StatusOr<std::string> text = io::ReadCheckpointConfig(pretrained);
    if (!text.ok()) o.fail("from_pretrained", text.status().message());
    absl::StatusOr<nn::LlamaConfig> read = nn::LlamaConfigFromHuggingFaceJson(*text, path);
    if (!read.ok()) o.fail("from_pretrained", read.status().message());
    config = *read;
  }
  // The architecture: from the table, unless from_pretrained's config.json
  // fixes it (then the table's values are not used, and a note says so: a
  // recipe's small CPU model and --set model.from_pretrained=DIR combine).
  nn::LlamaConfig table_config = config;
  table_config.vocab_size = o.integer("vocab_size", config.vocab_size);
  table_config.hidden_size = o.integer("hidden_size", config.hidden_size);
  table_config.intermediate_size = o.integer("intermediate_size", config.intermediate_size);
  table_config.num_hidden_layers = o.integer("num_hidden_layers", config.num_hidden_layers);
  table_config.num_attention_heads = o.integer("num_attention_heads", config.num_attention_heads);
  table_config.num_key_value_heads = o.integer("num_key_value_heads", config.num_key_value_heads);
  table_config.head_dim = o.integer("head_dim", config.head_dim);
  table_config.tie_word_embeddings = o.boolean("tie_word_embeddings", config.tie_word_embeddings);
  table_config.attention_bias = o.boolean("attention_bias", config.attention_bias);
  table_config.mlp_bias = o.boolean("mlp_bias", config.mlp_bias);
  table_config.qkv_bias = o.boolean("qkv_bias", config.qkv_bias);
  table_config.rms_norm_eps = o.number("rms_norm_eps", config.rms_norm_eps);
  table_config.rope_theta = o.number("rope_theta", config.rope_theta);
  table_config.num_local_experts = o.integer("num_local_experts", config.num_local_experts);
  table_config.num_experts_per_tok = o.integer("num_experts_per_tok", config.num_experts_per_tok);
  std::vector<std::string> ignored;
  for (const char* key : {"preset", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_key_value_heads", "head_dim",
                          "tie_word_embeddings", "attention_bias", "mlp_bias", "qkv_bias", "rms_norm_eps",
                          "rope_theta", "num_local_experts", "num_experts_per_tok"}) {
    if (o.has(key)) ignored.push_back(key);
  }
  // An empty from_pretrained with nothing else describing the model is a
  // folder that never arrived (an unset variable, `--set
  // model.from_pretrained=$DIR`); without this it silently means Llama-2-7B's
  // defaults and fails much later, at boost. Beside a preset or sizes it stays
  // the placeholder recipes keep for --set.
  if (pretrained.empty() && ignored.empty() && o.has("from_pretrained")) {
    o.fail("from_pretrained", "is empty and nothing else describes the model: name a Hugging Face folder, "
                              "or give a preset or the model's sizes");
  }
  // Hugging Face's LlamaConfig() is Llama-2-7B: a table with no preset and
  // no sizes gets that, which a user may not expect of a few lines.
  if (pretrained.empty() && !o.has("preset") && !o.has("hidden_size") && !o.has("num_hidden_layers") &&
      GetRuntime(L)->rank.rank == 0) {
    std::fprintf(stderr, "colossal.model.llama: no preset, from_pretrained, hidden_size or num_hidden_layers: "
                         "Hugging Face LlamaConfig's defaults, Llama-2-7B's shape (4096 wide, 32 layers)\n");
  }
  if (pretrained.empty()) {
    config = table_config;
  } else if (!ignored.empty() && GetRuntime(L)->rank.rank == 0) {
    std::fprintf(stderr, "colossal.model.llama: from_pretrained's config.json fixes %s; the table's values are not used\n",
                 absl::StrJoin(ignored, ", ").c_str());
  }
  config.max_position_embeddings = o.integer("max_position_embeddings", config.max_position_embeddings);
  config.initializer_range = o.number("initializer_range", config.initializer_range);
  config.padded_vocab_multiple = o.integer("padded_vocab_multiple", config.padded_vocab_multiple);
  config.checkpoint_ratio = o.number("checkpoint_ratio", config.checkpoint_ratio);
  const int64_t seed = o.integer("seed", -1);
  o.finish();
  ThrowIfError(L, "colossal.model.llama", config.validate());
  std::shared_ptr<Runtime> rt = GetRuntime(L);
  auto model = std::make_shared<Model>();
  model->rt = rt;
  absl::StatusOr<std::unique_ptr<nn::Llama>> net = nn::Llama::declare(config, core::DType::kF32);
  ThrowIfError(L, "colossal.model.llama", net.status());
  model->net = *std::move(net);
  model->pretrained_dir = pretrained;
  model->seed = seed >= 0 ? static_cast<uint64_t>(seed) : rt->seed;
  PushHandle(L, std::move(model));
  return 1;
}

// The forward pass, through the booster (its plugin's hooks) when boosted.
absl::StatusOr<nn::ForwardResult> Forward(Model& model, const core::Tensor& tokens) {
  Runtime& rt = *model.rt;
  if (std::shared_ptr<BoosterObject> b = model.booster.lock(); b && b->booster) {
    return b->booster->forward(*rt.ctx, *model.net, tokens);
  }
  return model.net->forward(*rt.ctx, tokens);
}

// The forward pass and cross-entropy of `batch` (targets are the batch's next
// tokens). With `gradient`, the loss's gradient replaces the logits (fused, in
// place: the logits are not needed after the loss).
struct ForwardLoss {
  nn::ForwardResult out;
  nn::CrossEntropyResult ce;
  std::shared_ptr<const nn::Documents> documents;
};
ForwardLoss RunForward(lua_State* L, Model& model, const Batch& batch, const char* what,
                       bool gradient) {
  Runtime& rt = *model.rt;
  MaterializeModel(L, model);
  const core::Tensor tokens = ToDevice(L, rt, batch.batch.inputs);
  const core::Tensor targets = ToDevice(L, rt, batch.batch.targets);
  // Packed documents (the loader's document_attention) attend within
  // themselves; a batch without them is one sequence a row.
  std::shared_ptr<const nn::Documents> documents = BatchDocuments(L, rt, batch);
  ThrowIfError(L, absl::StrCat(what, " forward"), model.net->set_documents(documents));
  absl::StatusOr<nn::ForwardResult> out = Forward(model, tokens);
  ThrowIfError(L, absl::StrCat(what, " forward"), out.status());
  nn::CrossEntropyOptions options;
  options.gradient = gradient;
  options.in_place = gradient;
  absl::StatusOr<nn::CrossEntropyResult> ce =
      model.net->loss(*rt.ctx, out->output, targets, options);
  ThrowIfError(L, absl::StrCat(what, " loss"), ce.status());
  return ForwardLoss{*std::move(out), *std::move(ce), std::move(documents)};
}

// model(batch) -> Loss
int Call(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  ForwardLoss f = RunForward(L, *model, *CheckHandle<Batch>(L, 2), "model", /*gradient=*/true);
  auto loss = std::make_shared<Loss>();
  loss->model = model;
  loss->state = std::make_shared<LossState>();
  loss->state->saved = std::move(f.out.saved);
  loss->state->dlogits = std::move(f.ce.dlogits);
  loss->state->value = f.ce.loss;
  loss->state->documents = std::move(f.documents);
  PushHandle(L, std::move(loss));
  return 1;
}

// model:evaluate(batch) -> mean loss (activations dropped at once)
int Evaluate(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  std::shared_ptr<Batch> batch = CheckHandle<Batch>(L, 2);
  // Evaluation runs without dropout; training mode comes back even on error.
  struct EvalMode {
    nn::CausalLM& net;
    bool training;
    explicit EvalMode(nn::CausalLM& n) : net(n), training(n.training()) { net.set_training(false); }
    ~EvalMode() { net.set_training(training); }
  } eval_mode(*model->net);
  // Pipeline stages: the batch's forward through every stage, its loss on all.
  if (std::shared_ptr<BoosterObject> b = model->booster.lock();
      b && b->booster && b->booster->plugin().pipeline() != nullptr) {
    Runtime& rt = *model->rt;
    const nn::MicroBatch mb{ToDevice(L, rt, batch->batch.inputs),
                            ToDevice(L, rt, batch->batch.targets), BatchDocuments(L, rt, *batch)};
    absl::StatusOr<float> loss =
        parallel::evaluate_pipeline(*rt.ctx, *b->booster, *model->net, absl::MakeConstSpan(&mb, 1));
    ThrowIfError(L, "model:evaluate", loss.status());
    lua_pushnumber(L, *loss);
    return 1;
  }
  const float value = RunForward(L, *model, *batch, "model:evaluate", /*gradient=*/false).ce.loss;
  lua_pushnumber(L, value);
  return 1;
}

// The tokenizer model:generate uses by default: a from_pretrained folder's
// own (tokenizer.json or tokenizer.model) when it has one, else GPT-2's.
std::string DefaultTokenizerFor(const Model& model) {
  if (!model.pretrained_dir.empty() && io::TokenizerFileIn(model.pretrained_dir)) {
    return model.pretrained_dir;
  }
  return DefaultTokenizerPath();
}

// model:generate(prompt, {max_new_tokens, temperature, top_k, seed, tokenizer}) -> text
// `tokenizer`: a gpt2.tiktoken file, a tokenizer.json / tokenizer.model, or a
// model folder holding one (io/tokenizer/load_tokenizer.h). The prompt gets the
// tokenizer's special tokens (Llama's BOS); generation stops at its EOS.
int Generate(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  const std::string prompt =
      StringArg(L, 2, /*non_empty=*/true, "model:generate: the prompt must be a non-empty string");
  OptionTable o(L, 3, "model:generate");
  const int64_t max_new = o.integer("max_new_tokens", 64);
  SamplingOptions sampling;
  sampling.temperature = o.number("temperature", 1.0);
  sampling.top_k = o.int32("top_k", 50);
  sampling.seed = static_cast<uint64_t>(o.integer("seed", 1337));
  const std::string path = o.string("tokenizer", DefaultTokenizerFor(*model));
  o.finish();
  if (max_new < 0 || max_new > (1 << 20)) o.fail("max_new_tokens", "must be in [0, 2^20]");
  // Generation attends over the whole prompt, not a training batch's documents.
  ThrowIfError(L, "model:generate", model->net->set_documents(nullptr));
  // A pipeline stage's model generates through its booster's stages.
  std::shared_ptr<BoosterObject> booster = model->booster.lock();
  const bool pipeline = model->net->pipeline_stage().count > 1;
  if (pipeline && (booster == nullptr || booster->booster == nullptr)) {
    RaiseError(L, "model:generate: a pipeline stage's model generates through its booster "
               "(booster:boost it first)", kErrorUsage);
  }
  if (sampling.temperature < 0) o.fail("temperature", "must be >= 0");
  if (sampling.top_k < 0) o.fail("top_k", "must be >= 0");
  absl::StatusOr<std::unique_ptr<io::TextTokenizer>> tokenizer = io::LoadTokenizer(path);
  if (!tokenizer.ok()) {
    RaiseError(L,
               absl::StrCat("model:generate: tokenizer ", path, ": ", tokenizer.status().message(),
                            " (tools/data/fetch_gpt2_ranks.sh installs GPT-2's)"),
               kErrorRuntime);
  }
  // The model may have more ids than the tokenizer (trained on its tokens):
  // only the tokenizer's are sampled.
  sampling.vocab_limit = (*tokenizer)->vocab_size();
  MaterializeModel(L, *model);
  absl::StatusOr<std::vector<int32_t>> encoded = (*tokenizer)->Encode(prompt, /*add_special_tokens=*/true);
  ThrowIfError(L, "model:generate: the prompt", encoded.status());
  std::vector<int32_t> tokens = *std::move(encoded);
  const size_t prompt_tokens = tokens.size();
  const int32_t eos = (*tokenizer)->eos_id().value_or(-1);
  // Each token's forward: through the pipeline's stages, or the model's own
  // (its booster's), with sequence-split activations padded and the last
  // position's logits shared. The stages send on the last position's logits
  // alone unless the sequence is split (then padding follows the last real
  // position, which last_position_logits picks out).
  const bool last_only = !model->net->tensor_parallel().chunks_sequence();
  const ForwardFn forward = SequenceSplitForward(
      *model->rt->ctx, *model->net,
      [&](const core::Tensor& input) -> absl::StatusOr<nn::ForwardResult> {
        if (!pipeline) return Forward(*model, input);
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor logits,
                                  parallel::pipeline_logits(*model->rt->ctx, *booster->booster,
                                                            *model->net, input, last_only));
        return nn::ForwardResult{logits, nullptr};
      });
  absl::StatusOr<int> n = GenerateTokens(*model->rt->ctx, *model->net, tokens,
                                         static_cast<int>(max_new), sampling, eos,
                                         [](int32_t) { return absl::OkStatus(); }, forward);
  ThrowIfError(L, "model:generate", n.status());
  // The prompt as given, then the new tokens' text (a BOS the tokenizer added
  // is not printed back).
  absl::StatusOr<std::string> text = (*tokenizer)->Decode(
      std::span<const int32_t>(tokens).subspan(prompt_tokens));
  ThrowIfError(L, "model:generate", text.status());
  const std::string out = prompt + *text;
  lua_pushlstring(L, out.data(), out.size());
  return 1;
}

// model:num_params() -> parameters (Hugging Face's count: the vocabulary
// tables without their padding rows)
int NumParams(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  // A pipeline stage holds part of the model: count the whole one (declared
  // again, no memory).
  std::unique_ptr<nn::CausalLM> whole;
  const nn::CausalLM* net = model->net.get();
  if (net->pipeline_stage().count > 1) {
    absl::StatusOr<std::unique_ptr<nn::CausalLM>> w = net->redeclare(net->dtype(), nn::ModelSplit{});
    ThrowIfError(L, "model:num_params", w.status());
    whole = *std::move(w);
    net = whole.get();
  }
  int64_t n = 0;
  for (const nn::ParameterEntry& e : net->table().entries()) n += net->hugging_face_shape(e).numel();
  lua_pushinteger(L, n);
  return 1;
}

// model:config() -> the family's fields (Hugging Face's names) plus, for every
// family, {family, n_layer, n_head, n_embd, vocab_size, padded_vocab_size,
// max_seq_len, dtype, device} (what the recipe loop reads).
int Config(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  const nn::CausalLM& net = *model->net;
  if (const auto* gpt2 = dynamic_cast<const nn::GPT2*>(&net)) {
    const nn::GPT2Config& c = gpt2->config();
    PushNumberTable(L, {{"n_layer", c.n_layer},
                        {"n_head", c.n_head},
                        {"n_embd", c.n_embd},
                        {"checkpoint_ratio", c.checkpoint_ratio},
                        {"embd_pdrop", c.embd_pdrop},
                        {"resid_pdrop", c.resid_pdrop}});
  } else if (const auto* llama = dynamic_cast<const nn::Llama*>(&net)) {
    const nn::LlamaConfig& c = llama->config();
    PushNumberTable(L, {{"n_layer", c.num_hidden_layers},
                        {"n_head", c.num_attention_heads},
                        {"n_embd", c.hidden_size},
                        {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size},
                        {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads},
                        {"num_key_value_heads", c.kv_heads()},
                        {"head_dim", c.head_size()},
                        {"max_position_embeddings", c.max_position_embeddings},
                        {"sliding_window", c.sliding_window},
                        {"num_local_experts", c.num_local_experts},
                        {"num_experts_per_tok", c.num_experts_per_tok},
                        {"rms_norm_eps", c.rms_norm_eps},
                        {"rope_theta", c.rope_theta},
                        {"checkpoint_ratio", c.checkpoint_ratio},
                        {"bos_token_id", c.bos_token_id},
                        {"eos_token_id", c.eos_token_id}});
    for (const auto& [key, value] : {std::pair{"tie_word_embeddings", c.tie_word_embeddings},
                                     std::pair{"attention_bias", c.attention_bias},
                                     std::pair{"mlp_bias", c.mlp_bias}, std::pair{"qkv_bias", c.qkv_bias}}) {
      lua_pushboolean(L, value);
      lua_setfield(L, -2, key);
    }
  } else {
    lua_newtable(L);
  }
  PushNumberTable(L, {{"vocab_size", net.vocab_size()},
                      {"padded_vocab_size", net.padded_vocab_size()},
                      {"max_seq_len", net.max_seq_len()}});
  for (const char* key : {"vocab_size", "padded_vocab_size", "max_seq_len"}) {
    lua_getfield(L, -1, key);
    lua_setfield(L, -3, key);
  }
  lua_pop(L, 1);
  lua_pushstring(L, net.family());
  lua_setfield(L, -2, "family");
  lua_pushstring(L, core::dtype_name(net.dtype()));
  lua_setfield(L, -2, "dtype");
  lua_pushstring(L, model->rt->device.to_string().c_str());
  lua_setfield(L, -2, "device");
  return 1;
}

int ModelToString(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  std::string s = model->net->describe();
  s.insert(s.size() - 1, absl::StrCat(", ", model->rt->device.to_string()));
  lua_pushstring(L, s.c_str());
  return 1;
}

// loss:item() -> the (scaled) mean loss as a number
int Item(lua_State* L) {
  std::shared_ptr<Loss> loss = CheckHandle<Loss>(L, 1);
  lua_pushnumber(L, loss->state->value * loss->scale);
  return 1;
}

// loss / n -> a loss whose backward is scaled by 1/n (accumulation)
int Div(lua_State* L) {
  std::shared_ptr<Loss> loss = CheckHandle<Loss>(L, 1);
  int ok = 0;
  const double d = lua_tonumberx(L, 2, &ok);
  if (!ok || !(d != 0) || !std::isfinite(d)) {
    RaiseError(L, "loss / x: x must be a finite, non-zero number", kErrorUsage);
  }
  auto scaled = std::make_shared<Loss>(*loss);
  scaled->scale = loss->scale / d;
  PushHandle(L, std::move(scaled));
  return 1;
}

// loss * w, w * loss -> a loss whose backward is scaled by w: a micro-batch's
// share of a step (batch:counted() / the step's count). w = 0 is allowed (a
// micro-batch whose targets are all ignored adds nothing).
int Mul(lua_State* L) {
  const int loss_at = luaL_testudata(L, 1, Loss::kMetatable) != nullptr ? 1 : 2;
  std::shared_ptr<Loss> loss = CheckHandle<Loss>(L, loss_at);
  int ok = 0;
  const double w = lua_tonumberx(L, 3 - loss_at, &ok);
  if (!ok || !std::isfinite(w)) RaiseError(L, "loss * x: x must be a finite number", kErrorUsage);
  auto scaled = std::make_shared<Loss>(*loss);
  scaled->scale = loss->scale * w;
  PushHandle(L, std::move(scaled));
  return 1;
}

int LossToString(lua_State* L) {
  std::shared_ptr<Loss> loss = CheckHandle<Loss>(L, 1);
  lua_pushstring(L, absl::StrFormat("loss(%.6f)", loss->state->value * loss->scale).c_str());
  return 1;
}

// batch:tokens() -> rows * seq_len
int BatchTokens(lua_State* L) {
  std::shared_ptr<Batch> batch = CheckHandle<Batch>(L, 1);
  lua_pushinteger(L, batch->batch.inputs.numel());
  return 1;
}

// batch:counted() -> the targets the loss counts (not ignore_index): its mean's
// denominator
int BatchCounted(lua_State* L) {
  lua_pushinteger(L, CheckHandle<Batch>(L, 1)->batch.counted);
  return 1;
}

}  // namespace

void MaterializeModel(lua_State* L, Model& model) {
  nn::ParameterStore& store = model.net->store();
  if (store.materialized() || model.plugin_memory) return;
  const core::Stream& stream = model.rt->ctx->compute_stream();
  ThrowIfError(L, "materializing the model", store.allocate(stream));
  ThrowIfError(L, "initialising the model", store.initialize(model.seed, stream));
  LoadPretrainedWeights(L, model);
}

void LoadPretrainedWeights(lua_State* L, Model& model, parallel::Booster* booster) {
  if (model.pretrained_dir.empty() || model.pretrained_loaded) return;
  // The model-only load of checkpoints (any dtype in the files; through the
  // plugin when there is one).
  parallel::RunParts run;
  run.architecture = model.net.get();
  run.model = &model.net->store();
  run.booster = booster;
  run.rank = model.rt->rank.rank;
  run.stream = &model.rt->ctx->compute_stream();
  ThrowIfError(L, absl::StrCat("loading ", model.pretrained_dir),
               parallel::load_run_model(model.pretrained_dir, run));
  model.pretrained_loaded = true;
}

int OpenModel(lua_State* L) {
  static const luaL_Reg kModelMethods[] = {{"evaluate", Protected<Evaluate>},
                                           {"generate", Protected<Generate>},
                                           {"num_params", Protected<NumParams>},
                                           {"config", Protected<Config>},
                                           {nullptr, nullptr}};
  static const luaL_Reg kModelMeta[] = {{"__call", Protected<Call>},
                                        {"__tostring", Protected<ModelToString>},
                                        {nullptr, nullptr}};
  RegisterType<Model>(L, kModelMethods, kModelMeta);
  static const luaL_Reg kLossMethods[] = {{"item", Protected<Item>}, {nullptr, nullptr}};
  static const luaL_Reg kLossMeta[] = {{"__div", Protected<Div>},
                                       {"__mul", Protected<Mul>},
                                       {"__tostring", Protected<LossToString>},
                                       {nullptr, nullptr}};
  RegisterType<Loss>(L, kLossMethods, kLossMeta);
  static const luaL_Reg kBatchMethods[] = {
      {"tokens", Protected<BatchTokens>}, {"counted", Protected<BatchCounted>}, {nullptr, nullptr}};
  RegisterType<Batch>(L, kBatchMethods);
  static const luaL_Reg kFunctions[] = {
      {"gpt2", Protected<Gpt2>}, {"llama", Protected<Llama>}, {nullptr, nullptr}};
  luaL_newlib(L, kFunctions);
  return 1;
}

}  // namespace colossal::lua
