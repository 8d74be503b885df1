// colossal::nn — GPT-2 (Hugging Face / llm.c architecture) built from nn/layers.
//
//   tokens [B, T] int32 -> Embedding (wte + wpe) [-> Dropout(embd_pdrop)] ->
//   n_layer TransformerBlocks (pre-LN, residual; Dropout(resid_pdrop) after
//   each c_proj when > 0) -> ln_f -> logits = x wte^T  [B, T, padded_vocab]
//
// The LM head is tied to the token embedding: there is no lm_head parameter,
// the head reads wte and its backward accumulates into wte's gradient too.
// The vocabulary is padded (llm.c's padded_vocab_size: 50257 -> 50304, a
// multiple of 128): wte has padded_vocab_size rows, the padding rows are
// initialised to zero, never indexed by valid tokens and get no gradient from
// the loss (cross_entropy with v_real = vocab_size gives dlogits 0 there).
//
// Parameters, in one table, under Hugging Face GPT-2 names and shapes:
//   transformer.wte.weight [Vp, C]   (HF: [V, C], the first V rows)
//   transformer.wpe.weight [maxT, C]
//   transformer.h.<i>.ln_1.{weight,bias} [C]
//   transformer.h.<i>.attn.c_attn.{weight [C, 3C], bias [3C]}     (Conv1D layout [in, out])
//   transformer.h.<i>.attn.c_proj.{weight [C, C], bias [C]}
//   transformer.h.<i>.ln_2.{weight,bias} [C]
//   transformer.h.<i>.mlp.c_fc.{weight [C, 4C], bias [4C]}
//   transformer.h.<i>.mlp.c_proj.{weight [4C, C], bias [C]}
//   transformer.ln_f.{weight,bias} [C]
// so a safetensors checkpoint maps one to one (dropping wte's padding rows).
//
// Initialisation (the table's init rules, GPT-2 / llm.c): weights N(0, 0.02),
// the residual projections (attn.c_proj.weight, mlp.c_proj.weight)
// N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weights 1, wte padding rows
// 0. Each parameter takes the Philox stream elements [init_offset, init_offset
// + numel) of `seed` (nn/module/parameter_init.h): the same seed gives the same
// weights on any device, in any dtype, whatever part of the model a process
// initialises.
//
// Lazy construction: GPT2::declare builds the modules and the parameter table
// and binds the layers' handles to a store with no memory (a 1-trillion-
// parameter GPT-2 is declared in milliseconds); whoever trains it materializes
// the store (a parallel plugin, or store().allocate() + init() on one device).
// GPT2::create does both steps for one device.
//
// Activation checkpointing: GPT2Config::checkpoint_ratio checkpoints the first
// int(ratio * n_layer) blocks (nn/module/module.h, "Activation checkpointing";
// tested bit-identical in gpt2_checkpoint_test.cc). Gradient accumulation over
// micro-batches: nn/train/train_step.h.
//
// CPU: float32 (training) and float64 (gradient checks), the tested path.
// CUDA (float32 and 16-bit): the same code through the kernels' CUDA
// functions; its tests (CPU vs CUDA) skip without a GPU and have not run yet.
//
//   COLOSSAL_ASSIGN_OR_RETURN(GPT2Config config, GPT2Config::preset("gpt2"));
//   COLOSSAL_ASSIGN_OR_RETURN(auto model, GPT2::declare(config, DType::kF32));   // no memory
//   COLOSSAL_RETURN_IF_ERROR(model->store().allocate(Stream::cpu()));   // or GPT2::create
//   COLOSSAL_RETURN_IF_ERROR(model->init(/*seed=*/1337));
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, model->forward(ctx, tokens));   // logits
//   COLOSSAL_ASSIGN_OR_RETURN(CrossEntropyResult ce,
//       cross_entropy(ctx, out.output, targets, config.vocab_size, {}));
//   COLOSSAL_RETURN_IF_ERROR(model->store().zero_grad(Stream::cpu()));
//   COLOSSAL_RETURN_IF_ERROR(model->backward(ctx, *out.saved, ce.dlogits).status());
//   // gradients: model->store().flat_grads(DType::kF32)
#ifndef COLOSSAL_NN_MODELS_GPT2_GPT2_H_
#define COLOSSAL_NN_MODELS_GPT2_GPT2_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nn/layers/block.h"
#include "nn/layers/dropout.h"
#include "nn/layers/embedding.h"
#include "nn/layers/layernorm.h"
#include "nn/layers/lm_head.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

struct GPT2Config {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t vocab_size = 50257;
  int64_t max_seq_len = 1024;
  // wte rows are vocab_size rounded up to a multiple of this.
  int64_t padded_vocab_multiple = 128;
  // Activation checkpointing (Colossal-AI's gradient_checkpointing_ratio): the
  // first checkpointed_layers() = int(checkpoint_ratio * n_layer) blocks
  // (truncated, as Colossal-AI's GradientCheckpointConfig) keep only their
  // input in forward and re-run their forward in backward (nn/module/module.h,
  // "Activation checkpointing"): same gradients bit for bit, less activation
  // memory, one more block forward per checkpointed block. In [0, 1].
  double checkpoint_ratio = 0.0;
  // Dropout (Hugging Face GPT2Config's names and places), in [0, 1); 0 = off,
  // the default, which builds no Dropout modules at all (every result is
  // bit-identical to a model without dropout support). Active only while the
  // model is training (Module::set_training; true by default).
  //   embd_pdrop:  after wte + wpe ("transformer.drop")
  //   resid_pdrop: after attn.c_proj ("transformer.h.<i>.attn.resid_dropout")
  //                and after mlp.c_proj ("transformer.h.<i>.mlp.dropout")
  //   attn_pdrop:  dropout of the attention probabilities; NOT supported (the
  //                fused attention kernel has none): validate() rejects > 0.
  // Masks come from the Context's Philox stream (nn/layers/dropout.h): the same
  // RNG state gives the same masks on CPU and CUDA, and activation
  // checkpointing replays them (same gradients as without checkpointing).
  double embd_pdrop = 0.0;
  double resid_pdrop = 0.0;
  double attn_pdrop = 0.0;

  int64_t checkpointed_layers() const {
    return static_cast<int64_t>(checkpoint_ratio * static_cast<double>(n_layer));
  }

  // The largest n_layer, n_head, n_embd, vocab_size, max_seq_len and
  // padded_vocab_multiple validate() accepts (the kernels take them as int32).
  static constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;

  int64_t padded_vocab_size() const {
    return (vocab_size + padded_vocab_multiple - 1) / padded_vocab_multiple *
           padded_vocab_multiple;
  }
  // "gpt2" (124M), "gpt2-medium" (350M), "gpt2-large" (774M), "gpt2-xl" (1558M).
  // NotFoundError with the closest name otherwise.
  static absl::StatusOr<GPT2Config> preset(absl::string_view name);
  // InvalidArgumentError naming the field: sizes must be positive, n_embd a
  // multiple of n_head, checkpoint_ratio in [0, 1], embd_pdrop and resid_pdrop
  // in [0, 1), attn_pdrop 0.
  absl::Status validate() const;
};

class GPT2 : public CausalLM {
 public:
  // The model's parameter table (no allocation).
  static absl::StatusOr<ParameterTable> parameter_table(const GPT2Config& config, core::DType dtype);
  // The shape Hugging Face's GPT2LMHeadModel gives `entry` (same name): equal
  // to entry.shape except transformer.wte.weight, which has vocab_size rows
  // there (ours are its first vocab_size rows, then the padding).
  static core::Shape hugging_face_shape(const GPT2Config& config, const ParameterEntry& entry);
  // Builds the model and its table, its layers bound to store(), which has
  // no memory (ParameterStore::declare). With split.tp the blocks' attention
  // and MLP split over its group (CausalLM::split; the embedding, ln_f and
  // the tied head stay whole on every rank); with split.stage only that
  // pipeline stage's modules are built and declared (the last stage declares
  // transformer.wte.weight for its tied head too). Errors: the config's
  // (validate()); n_head not a multiple of tp's size; a stage's layers out of
  // range.
  static absl::StatusOr<std::unique_ptr<GPT2>> declare(const GPT2Config& config, core::DType dtype,
                                                       const ModelSplit& split = {});
  using Module::declare;  // declare(ParameterTable&), hidden by the factory above
  // declare() + store().allocate(stream): the flat buffers on `stream`'s
  // device, values and gradients zero (call init()). Errors: the config's;
  // ResourceExhausted naming the bytes when the device is too small.
  static absl::StatusOr<std::unique_ptr<GPT2>> create(const GPT2Config& config, core::DType dtype,
                                                      const core::Stream& stream);

  const char* type() const override { return "GPT2"; }
  const GPT2Config& config() const { return config_; }

  // CausalLM. init(seed, stream) (GPT-2's initialisation, the table's rules)
  // comes from there.
  const char* family() const override { return "gpt2"; }
  core::DType dtype() const override { return dtype_; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t padded_vocab_size() const override { return config_.padded_vocab_size(); }
  int64_t max_seq_len() const override { return config_.max_seq_len; }
  ParameterStore& store() override { return store_; }
  const ParameterStore& store() const override { return store_; }
  // The n_layer blocks ("transformer.h"), e.g. for hooks; the first
  // config().checkpointed_layers() have checkpoint() set (Module::set_checkpoint
  // changes it per block).
  Sequential& blocks() override { return blocks_; }
  core::Shape hugging_face_shape(const ParameterEntry& entry) const override {
    return hugging_face_shape(config_, entry);
  }
  std::string hugging_face_config_json(core::DType dtype) const override;
  const ModelSplit& split() const override { return split_; }
  int64_t num_layers() const override { return config_.n_layer; }
  int64_t hidden_size() const override { return config_.n_embd; }
  std::vector<std::string> tied_parameters() const override { return {"transformer.wte.weight"}; }
  using CausalLM::redeclare;
  absl::StatusOr<std::unique_ptr<CausalLM>> redeclare(core::DType dtype,
                                                      const ModelSplit& split) const override;
  std::string describe() const override;

 protected:
  // Chunk c (CausalLM::chunk; the whole model by default): tokens int32
  // [B, T] (T <= max_seq_len) -> logits [B, T, padded_vocab_size]; a chunk
  // takes hidden states [B, T, n_embd] unless it is the first stage's first
  // and gives them unless it is the last stage's last.
  absl::StatusOr<ForwardResult> forward_chunk(core::Context& ctx, int c,
                                              const core::Tensor& input) override;
  // dlogits [B, T, padded_vocab_size] (or the next chunk's input gradient)
  // -> undefined (tokens have no gradient), or this chunk's input gradient.
  absl::StatusOr<core::Tensor> backward_chunk(core::Context& ctx, int c, Saved& saved,
                                              const core::Tensor& grad_output) override;

 private:
  GPT2(const GPT2Config& config, core::DType dtype, const ModelSplit& split);
  // The modules' declarations with GPT-2's init rules.
  absl::StatusOr<ParameterTable> declared_table();

  GPT2Config config_;
  core::DType dtype_;
  ModelSplit split_;
  std::unique_ptr<Embedding> embedding_;  // the first pipeline stage's
  std::unique_ptr<Dropout> drop_;  // "transformer.drop"; null when embd_pdrop == 0
  Sequential blocks_;  // every chunk's, in layer order
  // Chunk c's blocks: blocks_ [chunk_blocks_[c], chunk_blocks_[c + 1]).
  std::vector<size_t> chunk_blocks_;
  // Chunk c's modules (forward_chunk_through): embedding and dropout, its
  // blocks, ln_f and the head.
  ChunkModules chunk_modules(int c);
  std::unique_ptr<LayerNorm> ln_f_;  // the last stage's, with the head
  std::unique_ptr<LmHead> head_;     // logits = x wte^T
  ParameterStore store_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_GPT2_GPT2_H_
