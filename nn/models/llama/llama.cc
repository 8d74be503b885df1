#include "nn/models/llama/llama.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/gemm/gemm.h"
#include "core/status/status.h"
#include "core/status/suggest.h"
#include "core/tensor/shape.h"
#include "nn/layers/tensor_util.h"
#include "nn/models/llama/config_json.h"

namespace colossal::nn {
namespace {

struct Preset {
  const char* name;
  LlamaConfig config;
};

// Hugging Face's config.json of each checkpoint (the fields that differ from
// LlamaConfig's defaults).
std::vector<Preset> presets() {
  auto llama3_scaling = [](double factor) {
    return kernels::rope::Llama3RopeScaling{factor, 1.0, 4.0, 8192};
  };
  std::vector<Preset> p;
  LlamaConfig c;
  c = {};  // TinyLlama/TinyLlama-1.1B-Chat-v1.0
  c.hidden_size = 2048, c.intermediate_size = 5632, c.num_hidden_layers = 22;
  c.num_attention_heads = 32, c.num_key_value_heads = 4, c.rms_norm_eps = 1e-5;
  p.push_back({"tinyllama-1.1b", c});
  c = {};  // meta-llama/Llama-3.2-1B
  c.vocab_size = 128256, c.hidden_size = 2048, c.intermediate_size = 8192;
  c.num_hidden_layers = 16, c.num_attention_heads = 32, c.num_key_value_heads = 8;
  c.head_dim = 64, c.max_position_embeddings = 131072, c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0, c.rope_scaling = llama3_scaling(32.0), c.tie_word_embeddings = true;
  c.bos_token_id = 128000, c.eos_token_id = 128001;
  p.push_back({"llama3.2-1b", c});
  c.hidden_size = 3072, c.num_hidden_layers = 28, c.num_attention_heads = 24;
  c.head_dim = 128;  // meta-llama/Llama-3.2-3B (otherwise as 1B)
  p.push_back({"llama3.2-3b", c});
  c = {};  // meta-llama/Llama-2-7b-hf
  c.max_position_embeddings = 4096, c.rms_norm_eps = 1e-5;
  p.push_back({"llama2-7b", c});
  c = {};  // meta-llama/Meta-Llama-3-8B
  c.vocab_size = 128256, c.intermediate_size = 14336, c.num_key_value_heads = 8;
  c.max_position_embeddings = 8192, c.rms_norm_eps = 1e-5, c.rope_theta = 500000.0;
  c.bos_token_id = 128000, c.eos_token_id = 128001;
  p.push_back({"llama3-8b", c});
  c = {};  // meta-llama/Llama-2-70b-hf
  c.hidden_size = 8192, c.intermediate_size = 28672, c.num_hidden_layers = 80;
  c.num_attention_heads = 64, c.num_key_value_heads = 8, c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;
  p.push_back({"llama2-70b", c});
  // Qwen/Qwen2.5-*: q/k/v biases, rope_theta 1e6, <|endoftext|> as bos and
  // eos (there is no BOS in the text); the three small ones tie the head.
  auto qwen2 = [](int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads, int64_t kv_heads,
                  int64_t max_positions, bool tied) {
    LlamaConfig q;
    q.vocab_size = tied ? 151936 : 152064, q.hidden_size = hidden, q.intermediate_size = intermediate;
    q.num_hidden_layers = layers, q.num_attention_heads = heads, q.num_key_value_heads = kv_heads;
    q.max_position_embeddings = max_positions, q.rms_norm_eps = 1e-6, q.rope_theta = 1000000.0;
    q.tie_word_embeddings = tied, q.qkv_bias = true, q.bos_token_id = 151643, q.eos_token_id = 151643;
    return q;
  };
  p.push_back({"qwen2.5-0.5b", qwen2(896, 4864, 24, 14, 2, 32768, true)});
  p.push_back({"qwen2.5-1.5b", qwen2(1536, 8960, 28, 12, 2, 131072, true)});
  p.push_back({"qwen2.5-3b", qwen2(2048, 11008, 36, 16, 2, 32768, true)});
  p.push_back({"qwen2.5-7b", qwen2(3584, 18944, 28, 28, 4, 131072, false)});
  c = {};  // mistralai/Mixtral-8x7B-v0.1
  c.intermediate_size = 14336, c.num_key_value_heads = 8, c.max_position_embeddings = 32768;
  c.rms_norm_eps = 1e-5, c.rope_theta = 1000000.0, c.num_local_experts = 8, c.num_experts_per_tok = 2;
  p.push_back({"mixtral-8x7b", c});
  return p;
}


// A config error about `field` (it names the recipe key: core::option_key).
absl::Status field_error(absl::string_view field, absl::string_view why) {
  return core::with_option_key(absl::InvalidArgumentError(absl::StrCat("Llama config: ", field, " ", why)),
                               field);
}

}  // namespace

namespace {

// The parameters of `c` with `vocab_rows` rows in each vocabulary table, in
// long double: validate() asks before any int64 count could overflow.
long double count_parameters(const LlamaConfig& c, int64_t vocab_rows) {
  const long double C = c.hidden_size, D = c.head_size(), H = c.num_attention_heads,
                    KV = c.kv_heads(), I = c.intermediate_size;
  const long double attention =
      2 * C * H * D + 2 * C * KV * D + (c.attention_bias || c.qkv_bias ? H * D + 2 * KV * D : 0) +
      (c.attention_bias ? C : 0);
  const long double E = c.num_local_experts;
  const long double mlp = E > 0 ? E * 3 * C * I + E * C : 3 * C * I + (c.mlp_bias ? 2 * I + C : 0);
  return static_cast<long double>(vocab_rows) * C * (c.tie_word_embeddings ? 1 : 2) +
         static_cast<long double>(c.num_hidden_layers) * (attention + mlp + 2 * C) + C;
}

}  // namespace

int64_t LlamaConfig::parameter_count() const {
  return static_cast<int64_t>(count_parameters(*this, vocab_size));
}

absl::StatusOr<LlamaConfig> LlamaConfig::preset(absl::string_view name) {
  std::vector<absl::string_view> names;
  static const std::vector<Preset> kPresets = presets();
  for (const Preset& p : kPresets) {
    if (name == p.name) return p.config;
    names.push_back(p.name);
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown Llama preset \"", name, "\"", core::did_you_mean(name, names),
      " (known: ", absl::StrJoin(names, ", "), ")"));
}

absl::Status LlamaConfig::validate() const {
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"max_position_embeddings", max_position_embeddings},
      {"padded_vocab_multiple", padded_vocab_multiple}};
  for (const auto& [field, value] : sizes) {
    if (value <= 0) return field_error(field, absl::StrCat("is ", value, "; it must be positive"));
    if (value > (int64_t{1} << 31) - 1) {
      return field_error(field, absl::StrCat("is ", value, "; the limit is 2^31 - 1"));
    }
  }
  if (sliding_window < 0) {
    return field_error("sliding_window", absl::StrCat("is ", sliding_window,
                                                      "; it must be positive (0: none)"));
  }
  if (qkv_bias && mlp_bias) {
    return field_error("qkv_bias", "(Qwen2's) with mlp_bias is not supported: Qwen2's MLP has no biases");
  }
  if (qkv_bias && sliding_window > 0) {
    return field_error("qkv_bias", "(Qwen2's) with a sliding_window is not supported: a Qwen2 here has "
                                   "full causal attention in every layer (use_sliding_window false)");
  }
  if (num_local_experts < 0 || num_local_experts > 1024) {
    return field_error("num_local_experts",
                       absl::StrCat("is ", num_local_experts, "; it must be in [0, 1024] (0: a dense MLP)"));
  }
  if (num_local_experts > 0) {
    if (num_experts_per_tok < 1 || num_experts_per_tok > std::min<int64_t>(num_local_experts, 8)) {
      return field_error("num_experts_per_tok",
                         absl::StrCat("is ", num_experts_per_tok, "; it must be in [1, min(num_local_experts ",
                                      num_local_experts, ", 8)]"));
    }
    if (mlp_bias || qkv_bias || attention_bias) {
      return field_error(mlp_bias ? "mlp_bias" : qkv_bias ? "qkv_bias" : "attention_bias",
                         "with num_local_experts is not supported: Mixtral has no biases");
    }
  }
  if (num_key_value_heads < 0 || head_dim < 0) {
    return field_error(num_key_value_heads < 0 ? "num_key_value_heads" : "head_dim",
                       "is negative (0 means the Hugging Face default)");
  }
  if (num_attention_heads % kv_heads() != 0) {
    return field_error("num_attention_heads",
                       absl::StrCat("is ", num_attention_heads,
                                    "; it must be a multiple of num_key_value_heads ", kv_heads()));
  }
  if (head_dim == 0 && hidden_size % num_attention_heads != 0) {
    return field_error("hidden_size", absl::StrCat("is ", hidden_size,
                                                   "; without head_dim it must be a multiple of "
                                                   "num_attention_heads ",
                                                   num_attention_heads));
  }
  if (head_size() % 2 != 0) {
    return field_error("head_dim", absl::StrCat("is ", head_size(),
                                                "; rotary embeddings need an even head size"));
  }
  if (!(rms_norm_eps > 0.0)) return field_error("rms_norm_eps", "must be positive");
  if (!(rope_theta > 0.0)) return field_error("rope_theta", "must be positive");
  if (!(initializer_range >= 0.0)) return field_error("initializer_range", "must be >= 0");
  if (!(checkpoint_ratio >= 0.0 && checkpoint_ratio <= 1.0)) {
    return field_error("checkpoint_ratio", absl::StrCat("is ", checkpoint_ratio,
                                                        "; it must be in [0, 1]"));
  }
  if (rope_scaling.has_value()) {
    const kernels::rope::Llama3RopeScaling& r = *rope_scaling;
    if (!(r.factor > 0.0) || !(r.low_freq_factor > 0.0) ||
        !(r.high_freq_factor > r.low_freq_factor) || r.original_max_position_embeddings <= 0) {
      return field_error("rope_scaling",
                         "needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                         "original_max_position_embeddings > 0");
    }
  }
  const long double total = count_parameters(*this, padded_vocab_size());
  if (total > static_cast<long double>(core::Shape::kMaxNumel)) {
    return field_error("num_hidden_layers",
                       absl::StrFormat("%d layers of width %d give %.3Lg parameters; the limit "
                                       "is 2^48 elements in one buffer",
                                       num_hidden_layers, hidden_size, total));
  }
  return absl::OkStatus();
}

Llama::Llama(const LlamaConfig& config, core::DType dtype, std::shared_ptr<RotaryTable> rope,
             const ModelSplit& split)
    : CausalLM("llama"),
      config_(config),
      dtype_(dtype),
      split_(split),
      rope_(std::move(rope)),
      blocks_("model.layers") {
  const PipelineStage& stage = split.stage;
  if (stage.first()) {
    embed_tokens_ = Embedding::tokens_only("model.embed_tokens", config.padded_vocab_size(),
                                           config.hidden_size, dtype, split.tp);
  }
  const LlamaBlockShape shape{
      .attention = {.hidden = config.hidden_size,
                    .heads = config.num_attention_heads,
                    .kv_heads = config.kv_heads(),
                    .head_dim = config.head_size(),
                    .qkv_bias = config.attention_bias || config.qkv_bias,
                    .o_bias = config.attention_bias},
      .intermediate = config.intermediate_size,
      .mlp_bias = config.mlp_bias,
      .rms_norm_eps = static_cast<float>(config.rms_norm_eps),
      .num_experts = config.num_local_experts,
      .experts_per_token = config.num_experts_per_tok};
  chunk_blocks_.push_back(0);
  for (const LayerRange& chunk : stage.chunks) {
    const int64_t end = chunk.end < 0 ? config.num_hidden_layers : chunk.end;
    for (int64_t i = chunk.first; i < end; ++i) {
      Module* block = blocks_.append(std::make_unique<LlamaBlock>(
          absl::StrCat("model.layers.", i), shape, rope_, dtype, split.tp, documents_));
      block->set_checkpoint(i < config.checkpointed_layers());
    }
    chunk_blocks_.push_back(blocks_.size());
  }
  if (stage.last()) {
    norm_ = std::make_unique<RMSNorm>(
        "model.norm", config.hidden_size,
        LayerNormOptions{.eps = static_cast<float>(config.rms_norm_eps), .dtype = dtype});
    // Untied: its own lm_head.weight. Tied: embed_tokens' weight, declared
    // here too on a last stage without the embedding.
    const bool tied = config.tie_word_embeddings;
    lm_head_ = std::make_unique<LmHead>(
        "lm_head", tied ? "model.embed_tokens.weight" : "lm_head.weight",
        config.padded_vocab_size(), config.hidden_size, dtype,
        /*declare_weight=*/!tied || !stage.first(), split.tp);
  }
  if (embed_tokens_ != nullptr) register_child(embed_tokens_.get());
  register_child(&blocks_);
  if (norm_ != nullptr) register_child(norm_.get());
  if (lm_head_ != nullptr) register_child(lm_head_.get());
}

absl::StatusOr<ParameterTable> Llama::parameter_table(const LlamaConfig& config, core::DType dtype) {
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Llama> model, declare(config, dtype));
  return model->table();
}

absl::StatusOr<ParameterTable> Llama::declared_table() {
  ParameterTable table;
  COLOSSAL_RETURN_IF_ERROR(declare(table));
  // transformers' rules: every Linear weight and the embedding N(0,
  // initializer_range) (the layers declare N(0, 0.02)), the padding rows zero.
  const int64_t padding = (config_.padded_vocab_size() - config_.vocab_size) * config_.hidden_size;
  for (const ParameterEntry& e : std::vector<ParameterEntry>(table.entries())) {
    const bool vocab_rows = e.name == "model.embed_tokens.weight" || e.name == "lm_head.weight";
    if (e.shape.rank() == 2) {
      COLOSSAL_RETURN_IF_ERROR(table.set_init(
          e.name, InitRule::normal(config_.initializer_range, vocab_rows ? padding : 0)));
    }
  }
  return table;
}

absl::StatusOr<std::unique_ptr<Llama>> Llama::declare(const LlamaConfig& config, core::DType dtype,
                                                      const ModelSplit& split) {
  COLOSSAL_RETURN_IF_ERROR(config.validate());
  const TensorParallel& tp = split.tp;
  if (config.num_local_experts > 0 && tp.size() > 1) {
    return field_error("num_local_experts",
                       absl::StrCat("is ", config.num_local_experts, " with tp_size ", tp.size(),
                                    ": experts do not split over tensor-parallel ranks in this build "
                                    "(train a mixture of experts with tp_size 1: data parallelism, "
                                    "ZeRO, Gemini or pipeline stages)"));
  }
  const std::pair<const char*, int64_t> widths[] = {
      {"num_attention_heads", config.num_attention_heads},
      {"num_key_value_heads", config.kv_heads()},
      {"intermediate_size", config.intermediate_size},
      {"padded_vocab_multiple", config.padded_vocab_size()}};
  for (const auto& [field, value] : widths) {
    if (value % tp.size() != 0) {
      const std::string why =
          absl::StrCat(value, " does not split over ", tp.size(), " tensor-parallel ranks (tp_size must divide it)");
      if (absl::string_view(field) != "padded_vocab_multiple") return field_error(field, why);
      return absl::InvalidArgumentError(
          absl::StrCat("Llama config: the padded vocabulary (padded_vocab_multiple) ", why));
    }
  }
  // all_to_all sequence parallelism gives each rank heads / sp_size whole heads.
  for (const auto& [field, value] : {widths[0], widths[1]}) {
    if (value % (tp.size() * tp.sequence_size()) != 0) {
      return field_error(field, absl::StrCat(value, " does not split over ", tp.size(), " tensor-parallel x ",
                                             tp.sequence_size(),
                                             " sequence-parallel ranks (all_to_all: tp_size x sp_size "
                                             "must divide it)"));
    }
  }
  COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<RotaryTable> rope,
                            RotaryTable::create(config.head_size(), config.rope_theta,
                                                config.rope_scaling));
  COLOSSAL_RETURN_IF_ERROR(
      core::with_option_key(check_stage(split.stage, config.num_hidden_layers, "Llama config: num_hidden_layers"),
                            "num_hidden_layers"));
  std::unique_ptr<Llama> model(new Llama(config, dtype, std::move(rope), split));
  COLOSSAL_ASSIGN_OR_RETURN(ParameterTable table, model->declared_table());
  if (split.stage.count > 1) {
    // A stage's parameters take the whole model's initial values.
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Llama> whole, declare(config, dtype, {split.tp, {}}));
    COLOSSAL_RETURN_IF_ERROR(table.adopt_init_offsets(whole->table()));
  }
  model->store_ = ParameterStore::declare(table);
  COLOSSAL_RETURN_IF_ERROR(model->bind(model->store_));
  return model;
}

absl::StatusOr<std::unique_ptr<Llama>> Llama::create(const LlamaConfig& config, core::DType dtype,
                                                     const core::Stream& stream) {
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Llama> model, declare(config, dtype));
  COLOSSAL_RETURN_IF_ERROR(model->store_.allocate(stream));
  return model;
}

core::Shape Llama::hugging_face_shape(const ParameterEntry& entry) const {
  if (entry.name == "model.embed_tokens.weight" || entry.name == "lm_head.weight") {
    return core::Shape{config_.vocab_size, config_.hidden_size};
  }
  return entry.global_shape;  // the whole parameter under tensor parallelism
}

std::string Llama::hugging_face_config_json(core::DType dtype) const {
  return LlamaConfigToHuggingFaceJson(config_, dtype);
}

absl::StatusOr<std::unique_ptr<CausalLM>> Llama::redeclare(core::DType dtype,
                                                           const ModelSplit& split) const {
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Llama> model, declare(config_, dtype, split));
  return std::unique_ptr<CausalLM>(std::move(model));
}

std::string Llama::describe() const {
  return absl::StrFormat(
      "Llama(layers=%d, hidden=%d, heads=%d, kv_heads=%d, head_dim=%d, intermediate=%d, %s"
      "vocab=%d, %s, %s)",
      config_.num_hidden_layers, config_.hidden_size, config_.num_attention_heads,
      config_.kv_heads(), config_.head_size(), config_.intermediate_size,
      config_.num_local_experts > 0
          ? absl::StrFormat("experts=%d, top_k=%d, ", config_.num_local_experts, config_.num_experts_per_tok)
          : std::string(),
      config_.vocab_size, config_.tie_word_embeddings ? "tied" : "untied", core::dtype_name(dtype_));
}

ChunkModules Llama::chunk_modules(int c) {
  ChunkModules m{{embed_tokens_.get()}, &blocks_, 0, 0, {norm_.get(), lm_head_.get()}};
  if (c >= 0 && static_cast<size_t>(c) + 1 < chunk_blocks_.size()) {
    m.first = chunk_blocks_[c];
    m.end = chunk_blocks_[c + 1];
  }
  return m;
}

absl::StatusOr<ForwardResult> Llama::forward_chunk(core::Context& ctx, int c,
                                                   const core::Tensor& input) {
  if (input.rank() >= 2 && input.dim(1) > config_.context()) {
    const bool window = config_.context() < config_.max_position_embeddings;
    return absl::InvalidArgumentError(absl::StrCat(
        "the input is ", input.to_string(), "; the model takes at most ", config_.context(),
        window ? " positions (its sliding_window: longer sequences need sliding-window "
                 "attention, which this build does not have)"
               : " positions (max_position_embeddings)"));
  }
  return forward_chunk_through(ctx, split_, c, chunk_modules(c), input);
}

absl::StatusOr<core::Tensor> Llama::backward_chunk(core::Context& ctx, int c, Saved& saved,
                                                   const core::Tensor& grad_output) {
  return backward_chunk_through(ctx, split_, c, chunk_modules(c), saved, grad_output);
}

}  // namespace colossal::nn
