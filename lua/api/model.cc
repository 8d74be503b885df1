// colossal.model: GPT-2 models, the loss of a batch, evaluation and sampling.
//
//   local model = colossal.model.gpt2{ preset = "gpt2", checkpoint_ratio = 0.5 }
//   local model = colossal.model.gpt2{ n_layer = 4, n_head = 4, n_embd = 128, max_seq_len = 128 }
//   local loss = model(batch)            -- forward + fused cross-entropy; loss:item()
//   booster:backward(loss / accumulation_steps, optimizer)
//   local v = model:evaluate(batch)      -- mean loss, no backward
//   print(model:generate("To be", { max_new_tokens = 32, temperature = 0.8 }))
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/ops/elementwise.h"
#include "io/tokenizer/tokenizer.h"
#include "lua/api/generation.h"
#include "lua/api/lua_util.h"
#include "lua/api/objects.h"
#include "nn/layers/cross_entropy.h"

namespace colossal::lua {
namespace {

core::Tensor ToDevice(lua_State* L, Runtime& rt, const core::Tensor& host) {
  absl::StatusOr<core::Tensor> t = host.to(rt.device, rt.ctx->compute_stream());
  ThrowIfError(L, "copying the batch to the device", t.status());
  return *std::move(t);
}

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
};
ForwardLoss RunForward(lua_State* L, Model& model, const Batch& batch, const char* what,
                       bool gradient) {
  Runtime& rt = *model.rt;
  MaterializeModel(L, model);
  const core::Tensor tokens = ToDevice(L, rt, batch.batch.inputs);
  const core::Tensor targets = ToDevice(L, rt, batch.batch.targets);
  absl::StatusOr<nn::ForwardResult> out = Forward(model, tokens);
  ThrowIfError(L, absl::StrCat(what, " forward"), out.status());
  nn::CrossEntropyOptions options;
  options.gradient = gradient;
  options.in_place = gradient;
  absl::StatusOr<nn::CrossEntropyResult> ce =
      nn::cross_entropy(*rt.ctx, out->output, targets, model.net->config().vocab_size, options);
  ThrowIfError(L, absl::StrCat(what, " loss"), ce.status());
  return ForwardLoss{*std::move(out), *std::move(ce)};
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
  PushHandle(L, std::move(loss));
  return 1;
}

// model:evaluate(batch) -> mean loss (activations dropped at once)
int Evaluate(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  std::shared_ptr<Batch> batch = CheckHandle<Batch>(L, 2);
  // Evaluation runs without dropout; training mode comes back even on error.
  struct EvalMode {
    nn::GPT2& net;
    bool training;
    explicit EvalMode(nn::GPT2& n) : net(n), training(n.training()) { net.set_training(false); }
    ~EvalMode() { net.set_training(training); }
  } eval_mode(*model->net);
  const float value = RunForward(L, *model, *batch, "model:evaluate", /*gradient=*/false).ce.loss;
  lua_pushnumber(L, value);
  return 1;
}

// model:generate(prompt, {max_new_tokens, temperature, top_k, seed, tokenizer}) -> text
int Generate(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  const std::string prompt =
      StringArg(L, 2, /*non_empty=*/true, "model:generate: the prompt must be a non-empty string");
  OptionTable o(L, 3, "model:generate");
  const int64_t max_new = o.integer("max_new_tokens", 64);
  SamplingOptions sampling;
  sampling.temperature = o.number("temperature", 1.0);
  sampling.top_k = static_cast<int>(o.integer("top_k", 50));
  sampling.seed = static_cast<uint64_t>(o.integer("seed", 1337));
  const std::string path = o.string("tokenizer", DefaultTokenizerPath());
  o.finish();
  if (max_new < 0 || max_new > (1 << 20)) o.fail("max_new_tokens", "must be in [0, 2^20]");
  if (sampling.temperature < 0) o.fail("temperature", "must be >= 0");
  if (sampling.top_k < 0) o.fail("top_k", "must be >= 0");
  absl::StatusOr<io::Tokenizer> tokenizer = io::Tokenizer::FromTiktokenFile(path);
  if (!tokenizer.ok()) {
    RaiseError(L,
               absl::StrCat("model:generate: tokenizer ", path, ": ", tokenizer.status().message(),
                            " (tools/data/fetch_gpt2_ranks.sh installs it)"),
               kErrorRuntime);
  }
  MaterializeModel(L, *model);
  std::vector<int32_t> tokens = tokenizer->EncodeOrdinary(prompt);
  const int32_t eot = tokenizer->special_token_id(io::kEndOfText).value_or(io::kGpt2EndOfTextId);
  absl::StatusOr<int> n = GenerateTokens(*model->rt->ctx, *model->net, tokens,
                                         static_cast<int>(max_new), sampling, eot,
                                         [](int32_t) { return absl::OkStatus(); },
                                         [&](const core::Tensor& input) {
                                           return Forward(*model, input);
                                         });
  ThrowIfError(L, "model:generate", n.status());
  absl::StatusOr<std::string> text = tokenizer->Decode(std::span<const int32_t>(tokens));
  ThrowIfError(L, "model:generate", text.status());
  lua_pushlstring(L, text->data(), text->size());
  return 1;
}

// model:num_params() -> parameters (HF count: wte without its padding rows)
int NumParams(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  const nn::GPT2Config& c = model->net->config();
  const int64_t padding = (c.padded_vocab_size() - c.vocab_size) * c.n_embd;
  lua_pushinteger(L, model->net->table().parameter_count() - padding);
  return 1;
}

// model:config() -> {n_layer, n_head, n_embd, vocab_size, max_seq_len, dtype, device}
int Config(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  const nn::GPT2Config& c = model->net->config();
  PushNumberTable(L, {{"n_layer", c.n_layer},
                      {"n_head", c.n_head},
                      {"n_embd", c.n_embd},
                      {"vocab_size", c.vocab_size},
                      {"padded_vocab_size", c.padded_vocab_size()},
                      {"max_seq_len", c.max_seq_len},
                      {"checkpoint_ratio", c.checkpoint_ratio},
                      {"embd_pdrop", c.embd_pdrop},
                      {"resid_pdrop", c.resid_pdrop}});
  lua_pushstring(L, core::dtype_name(model->net->dtype()));
  lua_setfield(L, -2, "dtype");
  lua_pushstring(L, model->rt->device.to_string().c_str());
  lua_setfield(L, -2, "device");
  return 1;
}

int ModelToString(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  const nn::GPT2Config& c = model->net->config();
  const std::string s = absl::StrFormat("GPT2(n_layer=%d, n_head=%d, n_embd=%d, vocab=%d, %s, %s)",
                                        c.n_layer, c.n_head, c.n_embd, c.vocab_size,
                                        core::dtype_name(model->net->dtype()),
                                        model->rt->device.to_string());
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

}  // namespace

void MaterializeModel(lua_State* L, Model& model) {
  nn::ParameterStore& store = model.net->store();
  if (store.materialized() || model.plugin_memory) return;
  const core::Stream& stream = model.rt->ctx->compute_stream();
  ThrowIfError(L, "materializing the model", store.allocate(stream));
  ThrowIfError(L, "initialising the model", store.initialize(model.seed, stream));
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
                                       {"__tostring", Protected<LossToString>},
                                       {nullptr, nullptr}};
  RegisterType<Loss>(L, kLossMethods, kLossMeta);
  static const luaL_Reg kBatchMethods[] = {{"tokens", Protected<BatchTokens>}, {nullptr, nullptr}};
  RegisterType<Batch>(L, kBatchMethods);
  static const luaL_Reg kFunctions[] = {{"gpt2", Protected<Gpt2>}, {nullptr, nullptr}};
  luaL_newlib(L, kFunctions);
  return 1;
}

}  // namespace colossal::lua
