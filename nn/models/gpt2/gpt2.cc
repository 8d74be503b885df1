#include "nn/models/gpt2/gpt2.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/gemm/gemm.h"
#include "core/status/status.h"
#include "core/status/suggest.h"
#include "core/tensor/shape.h"
#include "nn/layers/tensor_util.h"
#include "nn/models/gpt2/config_json.h"

namespace colossal::nn {
namespace {

struct Preset {
  const char* name;
  int64_t n_layer, n_head, n_embd;
};
constexpr Preset kPresets[] = {
    {"gpt2", 12, 12, 768},
    {"gpt2-medium", 24, 16, 1024},
    {"gpt2-large", 36, 20, 1280},
    {"gpt2-xl", 48, 25, 1600},
};


}  // namespace

absl::StatusOr<GPT2Config> GPT2Config::preset(absl::string_view name) {
  std::vector<absl::string_view> names;
  for (const Preset& p : kPresets) {
    if (name == p.name) {
      GPT2Config c;
      c.n_layer = p.n_layer;
      c.n_head = p.n_head;
      c.n_embd = p.n_embd;
      return c;
    }
    names.push_back(p.name);
  }
  return absl::NotFoundError(absl::StrCat("unknown GPT-2 preset \"", name, "\"",
                                          core::did_you_mean(name, names),
                                          " (known: gpt2, gpt2-medium, gpt2-large, gpt2-xl)"));
}

namespace {
// A config error about `field` (it names the recipe key: core::option_key).
absl::Status config_error(absl::string_view field, const std::string& message) {
  return core::with_option_key(absl::InvalidArgumentError(message), field);
}
}  // namespace

absl::Status GPT2Config::validate() const {
  const std::pair<const char*, int64_t> fields[] = {
      {"n_layer", n_layer},         {"n_head", n_head},         {"n_embd", n_embd},
      {"vocab_size", vocab_size},   {"max_seq_len", max_seq_len},
      {"padded_vocab_multiple", padded_vocab_multiple}};
  for (const auto& [field, value] : fields) {
    if (value <= 0) {
      return config_error(field, absl::StrCat("GPT-2 config: ", field, " is ", value, "; it must be positive"));
    }
  }
  if (!(checkpoint_ratio >= 0.0 && checkpoint_ratio <= 1.0)) {
    return config_error("checkpoint_ratio", absl::StrCat("GPT-2 config: checkpoint_ratio is ",
                                                         checkpoint_ratio, "; it must be in [0, 1]"));
  }
  const std::pair<const char*, double> drops[] = {{"embd_pdrop", embd_pdrop},
                                                  {"resid_pdrop", resid_pdrop}};
  for (const auto& [field, value] : drops) {
    if (!(value >= 0.0 && value < 1.0)) {
      return config_error(field, absl::StrCat("GPT-2 config: ", field, " is ", value,
                                              "; it must be in [0, 1) (0 = no dropout)"));
    }
  }
  if (attn_pdrop != 0.0) {
    return config_error("attn_pdrop", absl::StrCat(
        "GPT-2 config: attn_pdrop is ", attn_pdrop,
        "; attention-probability dropout is not supported (the fused attention kernel has "
        "none): set attn_pdrop = 0 (embd_pdrop and resid_pdrop are supported)"));
  }
  if (n_embd % n_head != 0) {
    return config_error("n_embd", absl::StrCat("GPT-2 config: n_embd ", n_embd,
                                               " is not a multiple of n_head ", n_head));
  }
  // Sizes, before anything is allocated: the kernels take these as int32, and
  // no tensor (nor the flat parameter buffer) may pass core::Shape's limit.
  for (const auto& [field, value] : fields) {
    if (value > kMaxDim) {
      return config_error(field, absl::StrCat("GPT-2 config: ", field, " is ", value,
                                              "; the limit is 2^31 - 1 = ", kMaxDim));
    }
  }
  const long double limit = static_cast<long double>(core::Shape::kMaxNumel);
  const long double c = n_embd, embeddings = (padded_vocab_size() + max_seq_len) * c,
                    layer = 12 * c * c + 13 * c, total = embeddings + n_layer * layer + 2 * c;
  if (total > limit) {
    // Blame n_embd when even one layer is too big, else the layer count.
    const bool width = embeddings + layer + 2 * c > limit;
    return config_error(width ? "n_embd" : "n_layer", absl::StrFormat(
        "GPT-2 config: %s is %d: n_layer %d x n_embd %d gives %.3Lg parameters; the limit is "
        "2^48 = %.3Lg elements in one buffer",
        width ? "n_embd" : "n_layer", width ? n_embd : n_layer, n_layer, n_embd, total, limit));
  }
  return absl::OkStatus();
}

GPT2::GPT2(const GPT2Config& config, core::DType dtype, const ModelSplit& split)
    : CausalLM("gpt2"), config_(config), dtype_(dtype), split_(split), blocks_("transformer.h") {
  const PipelineStage& stage = split.stage;
  if (stage.first()) {
    embedding_ = std::make_unique<Embedding>("transformer", config.padded_vocab_size(),
                                             config.max_seq_len, config.n_embd, dtype, split.tp);
    if (config.embd_pdrop != 0.0) {
      drop_ = std::make_unique<Dropout>("transformer.drop", config.embd_pdrop);
    }
  }
  chunk_blocks_.push_back(0);
  for (const LayerRange& chunk : stage.chunks) {
    const int64_t end = chunk.end < 0 ? config.n_layer : chunk.end;
    for (int64_t i = chunk.first; i < end; ++i) {
      Module* block = blocks_.append(std::make_unique<TransformerBlock>(
          absl::StrCat("transformer.h.", i), config.n_embd, config.n_head, dtype,
          config.resid_pdrop, split.tp));
      block->set_checkpoint(i < config.checkpointed_layers());
    }
    chunk_blocks_.push_back(blocks_.size());
  }
  if (stage.last()) {
    ln_f_ = std::make_unique<LayerNorm>("transformer.ln_f", config.n_embd,
                                        LayerNormOptions{.dtype = dtype});
    // The tied head reads wte: the embedding's entry, or its own on a last
    // stage without the embedding.
    head_ = std::make_unique<LmHead>("transformer.lm_head", "transformer.wte.weight",
                                     config.padded_vocab_size(), config.n_embd, dtype,
                                     /*declare_weight=*/!stage.first(), split.tp);
  }
  if (embedding_ != nullptr) register_child(embedding_.get());
  if (drop_ != nullptr) register_child(drop_.get());
  register_child(&blocks_);
  if (ln_f_ != nullptr) register_child(ln_f_.get());
  if (head_ != nullptr) register_child(head_.get());
}

absl::StatusOr<ParameterTable> GPT2::parameter_table(const GPT2Config& config, core::DType dtype) {
  COLOSSAL_RETURN_IF_ERROR(config.validate());
  GPT2 model(config, dtype, ModelSplit{});
  return model.declared_table();
}

absl::StatusOr<ParameterTable> GPT2::declared_table() {
  ParameterTable table;
  COLOSSAL_RETURN_IF_ERROR(declare(table));
  // GPT-2's rules on top of the layers' defaults (weights N(0, 0.02), biases
  // 0, LayerNorm weights 1): the residual projections are scaled down by
  // sqrt(2 n_layer), wte's padding rows are zero.
  const double std_residual = kDefaultInitStd / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  for (const ParameterEntry& e : std::vector<ParameterEntry>(table.entries())) {
    if (absl::EndsWith(e.name, "attn.c_proj.weight") || absl::EndsWith(e.name, "mlp.c_proj.weight")) {
      COLOSSAL_RETURN_IF_ERROR(table.set_init(e.name, InitRule::normal(std_residual)));
    }
  }
  const int64_t padding = (config_.padded_vocab_size() - config_.vocab_size) * config_.n_embd;
  if (table.find("transformer.wte.weight") != nullptr) {  // not on middle pipeline stages
    COLOSSAL_RETURN_IF_ERROR(
        table.set_init("transformer.wte.weight", InitRule::normal(kDefaultInitStd, padding)));
  }
  return table;
}

core::Shape GPT2::hugging_face_shape(const GPT2Config& config, const ParameterEntry& entry) {
  if (entry.name == "transformer.wte.weight") return core::Shape{config.vocab_size, config.n_embd};
  return entry.global_shape;  // the whole parameter under tensor parallelism
}

absl::StatusOr<std::unique_ptr<GPT2>> GPT2::declare(const GPT2Config& config, core::DType dtype,
                                                    const ModelSplit& split) {
  COLOSSAL_RETURN_IF_ERROR(config.validate());
  if (config.padded_vocab_size() % split.tp.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPT-2 config: the padded vocabulary ", config.padded_vocab_size(),
        " does not split over ", split.tp.size(),
        " tensor-parallel ranks (make padded_vocab_multiple a multiple of tp_size)"));
  }
  if (config.n_head % split.tp.size() != 0) {
    return config_error("n_head", absl::StrCat(
        "GPT-2 config: n_head ", config.n_head, " does not split over ", split.tp.size(),
        " tensor-parallel ranks (tp_size must divide it)"));
  }
  if (config.n_head % (split.tp.size() * split.tp.sequence_size()) != 0) {
    return config_error("n_head", absl::StrCat(
        "GPT-2 config: n_head ", config.n_head, " does not split over ", split.tp.size(),
        " tensor-parallel x ", split.tp.sequence_size(),
        " sequence-parallel ranks (all_to_all: tp_size x sp_size must divide it)"));
  }
  COLOSSAL_RETURN_IF_ERROR(
      core::with_option_key(check_stage(split.stage, config.n_layer, "GPT-2 config: n_layer"), "n_layer"));
  std::unique_ptr<GPT2> model(new GPT2(config, dtype, split));
  COLOSSAL_ASSIGN_OR_RETURN(ParameterTable table, model->declared_table());
  if (split.stage.count > 1) {
    // A stage's parameters take the whole model's initial values.
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<GPT2> whole, declare(config, dtype, {split.tp, {}}));
    COLOSSAL_RETURN_IF_ERROR(table.adopt_init_offsets(whole->table()));
  }
  model->store_ = ParameterStore::declare(table);
  COLOSSAL_RETURN_IF_ERROR(model->bind(model->store_));
  return model;
}

absl::StatusOr<std::unique_ptr<GPT2>> GPT2::create(const GPT2Config& config, core::DType dtype,
                                                   const core::Stream& stream) {
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<GPT2> model, declare(config, dtype));
  COLOSSAL_RETURN_IF_ERROR(model->store_.allocate(stream));
  return model;
}

absl::StatusOr<std::unique_ptr<CausalLM>> GPT2::redeclare(core::DType dtype,
                                                          const ModelSplit& split) const {
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<GPT2> model, declare(config_, dtype, split));
  return std::unique_ptr<CausalLM>(std::move(model));
}

std::string GPT2::hugging_face_config_json(core::DType dtype) const {
  return GPT2ConfigToHuggingFaceJson(config_, dtype);
}

std::string GPT2::describe() const {
  return absl::StrFormat("GPT2(n_layer=%d, n_head=%d, n_embd=%d, vocab=%d, %s)", config_.n_layer,
                         config_.n_head, config_.n_embd, config_.vocab_size,
                         core::dtype_name(dtype_));
}

ChunkModules GPT2::chunk_modules(int c) {
  ChunkModules m{{embedding_.get(), drop_.get()}, &blocks_, 0, 0, {ln_f_.get(), head_.get()}};
  if (c >= 0 && static_cast<size_t>(c) + 1 < chunk_blocks_.size()) {
    m.first = chunk_blocks_[c];
    m.end = chunk_blocks_[c + 1];
  }
  return m;
}

absl::StatusOr<ForwardResult> GPT2::forward_chunk(core::Context& ctx, int c,
                                                  const core::Tensor& input) {
  return forward_chunk_through(ctx, split_, c, chunk_modules(c), input);
}

absl::StatusOr<core::Tensor> GPT2::backward_chunk(core::Context& ctx, int c, Saved& saved,
                                                  const core::Tensor& grad_output) {
  return backward_chunk_through(ctx, split_, c, chunk_modules(c), saved, grad_output);
}

}  // namespace colossal::nn
