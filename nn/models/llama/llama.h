// colossal::nn — the Llama family (Llama 2/3, TinyLlama, Mistral, Qwen2 /
// Qwen2.5, a Llama with q/k/v biases, and Mixtral, a Mistral whose MLPs are
// sparse mixtures of experts) built from nn/layers, under Hugging Face's names.
//
//   tokens [B, T] int32 -> embed_tokens [B, T, C] -> num_hidden_layers
//   LlamaBlocks (pre-RMSNorm, rotary positions, grouped-query attention,
//   SwiGLU MLP) -> norm -> logits = x lm_head^T  [B, T, padded_vocab]
//
// Parameters, in one table, under Hugging Face LlamaForCausalLM's names
// (torch.nn.Linear layout [out, in]):
//   model.embed_tokens.weight [Vp, C]     (HF: [V, C], the first V rows)
//   model.layers.<i>.input_layernorm.weight [C]
//   model.layers.<i>.self_attn.q_proj.weight [H D, C]   (+ .bias with attention_bias or qkv_bias)
//   model.layers.<i>.self_attn.k_proj.weight [KV D, C]  v_proj the same
//   model.layers.<i>.self_attn.o_proj.weight [C, H D]   (+ .bias with attention_bias)
//   model.layers.<i>.post_attention_layernorm.weight [C]
//   model.layers.<i>.mlp.gate_proj.weight [I, C]  up_proj the same, down_proj [C, I]
//   (Mixtral, num_local_experts E > 0, in place of the mlp:
//    model.layers.<i>.block_sparse_moe.gate.weight [E, C]
//    model.layers.<i>.block_sparse_moe.experts.<j>.w1.weight [I, C]  w3 the same, w2 [C, I])
//   model.norm.weight [C]
//   lm_head.weight [Vp, C]                (absent with tie_word_embeddings: the
//                                          head reads embed_tokens)
// The vocabulary is padded to a multiple of padded_vocab_multiple as GPT-2's
// (llm.c): the padding rows are zero, never indexed, and get no gradient.
//
// Initialisation (transformers' LlamaPreTrainedModel): every Linear and the
// embedding N(0, initializer_range), RMSNorm weights 1, biases 0, padding rows
// 0; element i of a parameter takes Philox element init_offset + i of the seed
// (nn/module/parameter_init.h), so any part on any device gets the same values.
//
// Lazy construction as GPT-2 (gpt2.h): Llama::declare builds the modules and
// the table with no memory; a plugin (or store().allocate()) materializes it.
//
//   COLOSSAL_ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfig::preset("llama3.2-1b"));
//   COLOSSAL_ASSIGN_OR_RETURN(auto model, Llama::create(config, DType::kF32, Stream::cpu()));
//   COLOSSAL_RETURN_IF_ERROR(model->init(/*seed=*/1337));
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, model->forward(ctx, tokens));   // logits
#ifndef COLOSSAL_NN_MODELS_LLAMA_LLAMA_H_
#define COLOSSAL_NN_MODELS_LLAMA_LLAMA_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/rope/rope.h"
#include "nn/layers/embedding.h"
#include "nn/layers/linear.h"
#include "nn/layers/lm_head.h"
#include "nn/layers/llama_block.h"
#include "nn/layers/rmsnorm.h"
#include "nn/layers/rotary.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

// Hugging Face LlamaConfig's fields, names and defaults, plus ours at the end.
struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  // 0 means num_attention_heads (Hugging Face's None: plain multi-head attention).
  int64_t num_key_value_heads = 0;
  // 0 means hidden_size / num_attention_heads (Hugging Face's None).
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 2048;
  // Mistral's sliding_window (0: none, Hugging Face's null). A position
  // attends to itself and the sliding_window - 1 before it; this build has
  // only full causal attention, which is the same up to sliding_window
  // positions, so the model's context (max_seq_len) is the smaller of the two.
  int64_t sliding_window = 0;
  double initializer_range = 0.02;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // rope_scaling {"rope_type": "llama3", factor, low_freq_factor,
  // high_freq_factor, original_max_position_embeddings}; other types are
  // rejected by validate() (from_json names them).
  std::optional<kernels::rope::Llama3RopeScaling> rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  // Qwen2's biases on q/k/v_proj only (attention_bias puts one on o_proj
  // too). Hugging Face has no such field: config.json says model_type
  // "qwen2" (Qwen2 and Qwen2.5), which sets it.
  bool qkv_bias = false;
  // Mixtral's sparse mixture of experts: every layer's MLP becomes
  // num_local_experts SwiGLU experts of width intermediate_size, of which a
  // router (block_sparse_moe.gate) picks num_experts_per_tok per token and
  // weighs them by its softmax renormalised over the picks. 0: dense MLPs.
  // Hugging Face's load-balancing loss (output_router_logits) is not in this
  // build: config.json asking for it is refused.
  int64_t num_local_experts = 0;
  int64_t num_experts_per_tok = 2;
  int64_t bos_token_id = 1;
  int64_t eos_token_id = 2;
  // Ours: the embedding and head rows are vocab_size rounded up to a multiple
  // of this; and activation checkpointing of the first int(ratio * layers) blocks.
  int64_t padded_vocab_multiple = 128;
  double checkpoint_ratio = 0.0;

  int64_t kv_heads() const { return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  int64_t padded_vocab_size() const {
    return (vocab_size + padded_vocab_multiple - 1) / padded_vocab_multiple * padded_vocab_multiple;
  }
  // The longest sequence the model computes exactly (see sliding_window).
  int64_t context() const {
    return sliding_window > 0 ? std::min(sliding_window, max_position_embeddings)
                              : max_position_embeddings;
  }
  int64_t checkpointed_layers() const {
    return static_cast<int64_t>(checkpoint_ratio * static_cast<double>(num_hidden_layers));
  }
  // Parameters, padding rows excluded (what Hugging Face counts).
  int64_t parameter_count() const;

  // "tinyllama-1.1b", "llama3.2-1b", "llama3.2-3b", "llama2-7b", "llama3-8b",
  // "llama2-70b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b",
  // "mixtral-8x7b":
  // Hugging Face's config.json of those checkpoints. NotFound
  // with the closest name otherwise.
  static absl::StatusOr<LlamaConfig> preset(absl::string_view name);
  // InvalidArgumentError naming the field: sizes positive; heads a multiple of
  // key/value heads; head_dim even; hidden_size a multiple of heads when
  // head_dim is not given; eps, theta positive; checkpoint_ratio in [0, 1];
  // with experts: at most 1024, num_experts_per_tok in [1, min(experts, 8)],
  // no biases.
  absl::Status validate() const;
};

class Llama : public CausalLM {
 public:
  static absl::StatusOr<ParameterTable> parameter_table(const LlamaConfig& config, core::DType dtype);
  // Builds the model and its table, bound to store() with no memory. With
  // split.tp the blocks' attention and MLP split over its group (the
  // embedding, norms and head stay whole on every rank; a model with experts
  // is refused: tensor- and expert-parallel experts are not in this build); with split.stage
  // only that pipeline stage's modules are built (a tied head's last stage
  // declares model.embed_tokens.weight too). Errors: the config's; head counts
  // or intermediate_size not multiples of tp's size; a stage out of range.
  static absl::StatusOr<std::unique_ptr<Llama>> declare(const LlamaConfig& config, core::DType dtype,
                                                        const ModelSplit& split = {});
  using Module::declare;
  // declare() + store().allocate(stream).
  static absl::StatusOr<std::unique_ptr<Llama>> create(const LlamaConfig& config, core::DType dtype,
                                                       const core::Stream& stream);

  const char* type() const override { return "Llama"; }
  const LlamaConfig& config() const { return config_; }

  // CausalLM
  const char* family() const override { return "llama"; }
  core::DType dtype() const override { return dtype_; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t padded_vocab_size() const override { return config_.padded_vocab_size(); }
  int64_t max_seq_len() const override { return config_.context(); }
  ParameterStore& store() override { return store_; }
  const ParameterStore& store() const override { return store_; }
  Sequential& blocks() override { return blocks_; }
  core::Shape hugging_face_shape(const ParameterEntry& entry) const override;
  std::string hugging_face_config_json(core::DType dtype) const override;
  const ModelSplit& split() const override { return split_; }
  int64_t num_layers() const override { return config_.num_hidden_layers; }
  int64_t hidden_size() const override { return config_.hidden_size; }
  std::vector<std::string> tied_parameters() const override {
    if (!config_.tie_word_embeddings) return {};
    return {"model.embed_tokens.weight"};
  }
  using CausalLM::redeclare;
  absl::StatusOr<std::unique_ptr<CausalLM>> redeclare(core::DType dtype,
                                                      const ModelSplit& split) const override;
  std::string describe() const override;
  absl::Status set_documents(std::shared_ptr<const Documents> documents) override {
    documents_->current = std::move(documents);
    return absl::OkStatus();
  }

 protected:
  // Chunk c (CausalLM::chunk; the whole model by default): tokens int32
  // [B, T] -> logits [B, T, padded_vocab_size]; a chunk takes hidden states
  // [B, T, hidden_size] unless it is the first stage's first and gives them
  // unless it is the last stage's last.
  absl::StatusOr<ForwardResult> forward_chunk(core::Context& ctx, int c,
                                              const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_chunk(core::Context& ctx, int c, Saved& saved,
                                              const core::Tensor& grad_output) override;

 private:
  Llama(const LlamaConfig& config, core::DType dtype, std::shared_ptr<RotaryTable> rope,
        const ModelSplit& split);
  absl::StatusOr<ParameterTable> declared_table();

  LlamaConfig config_;
  core::DType dtype_;
  ModelSplit split_;
  std::shared_ptr<RotaryTable> rope_;
  std::shared_ptr<DocumentsSlot> documents_ = std::make_shared<DocumentsSlot>();  // the attention layers'
  std::unique_ptr<Embedding> embed_tokens_;  // the first pipeline stage's
  Sequential blocks_;  // every chunk's, in layer order
  // Chunk c's blocks: blocks_ [chunk_blocks_[c], chunk_blocks_[c + 1]).
  std::vector<size_t> chunk_blocks_;
  // Chunk c's modules (forward_chunk_through): embed_tokens, its blocks, the
  // final norm and lm_head.
  ChunkModules chunk_modules(int c);
  std::unique_ptr<RMSNorm> norm_;   // the last stage's, with the head
  std::unique_ptr<LmHead> lm_head_;  // lm_head.weight, or embed_tokens' when tied
  ParameterStore store_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_LLAMA_LLAMA_H_
