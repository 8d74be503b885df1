// colossal::nn — the contract every language-model family keeps (GPT-2,
// Llama), so plugins, checkpoints, the training loop and generation work on
// any of them.
//
// A CausalLM is a Module: tokens int32 [B, T] -> logits [B, T,
// padded_vocab_size()], where columns past vocab_size() are padding (the loss
// ignores them: cross_entropy's v_real). Its parameters are one table under
// Hugging Face's names, bound to store(), which a plugin materializes (see
// docs/architecture.md, "Who owns parameter memory"). blocks() are the
// repeated layers (hooks, activation checkpointing).
//
//   std::unique_ptr<CausalLM> model = ...;   // GPT2::declare, Llama::declare
//   COLOSSAL_ASSIGN_OR_RETURN(auto bf16, model->redeclare(DType::kBF16));   // no memory
//   COLOSSAL_RETURN_IF_ERROR(bf16->store().allocate(stream));
//   COLOSSAL_RETURN_IF_ERROR(bf16->init(seed, stream));
#ifndef COLOSSAL_NN_MODELS_CAUSAL_LM_CAUSAL_LM_H_
#define COLOSSAL_NN_MODELS_CAUSAL_LM_CAUSAL_LM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"
#include "core/tensor/shape.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/layers/cross_entropy.h"
#include "nn/layers/documents.h"
#include "nn/layers/tensor_parallel.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

// Blocks [first, end) of the whole model: one model chunk of a pipeline
// stage.
struct LayerRange {
  int64_t first = 0;
  int64_t end = -1;  // -1: through the last layer
};

// Pipeline parallelism: the part of the model one stage runs. Stage `index`
// of `count` holds the blocks of its `chunks` and, when first(), the
// embedding (its chunk 0 takes tokens), when last(), the final norm and the
// head (its last chunk gives logits); other chunks take and give hidden
// states [B, T, C]. With one chunk (the 1F1B schedule) a stage is one range
// of blocks; with C chunks (the interleaved schedule, Megatron's virtual
// stages) chunk c is virtual stage index + c * count of count * C, so the
// activations go round the stages C times. A tied head's weight is declared
// on both end stages (the plugin keeps the copies equal).
struct PipelineStage {
  int index = 0;
  int count = 1;
  std::vector<LayerRange> chunks = {LayerRange{}};  // in layer order
  int num_chunks() const { return static_cast<int>(chunks.size()); }
  bool first() const { return index == 0; }
  bool last() const { return index == count - 1; }
  bool takes_tokens(int chunk) const { return first() && chunk == 0; }
  bool gives_logits(int chunk) const { return last() && chunk == num_chunks() - 1; }
};

// Stage `index` of `count` with `chunks` model chunks over `layers` blocks,
// split as Colossal-AI's PipelineStageManager does: the blocks over count *
// chunks virtual stages, layers / (count * chunks) each, the remainder one
// each to the middle ones. InvalidArgument when there are fewer layers than
// virtual stages. `layers_per_stage` (Colossal-AI's num_layers_per_stage),
// when not empty, gives each virtual stage's count instead, in virtual stage
// order (stage s's chunk c is virtual stage c * count + s): count * chunks
// entries, each at least 1, summing to `layers` (else InvalidArgument naming
// num_layers_per_stage).
absl::StatusOr<PipelineStage> pipeline_stage(int64_t layers, int count, int index,
                                             int chunks = 1,
                                             absl::Span<const int64_t> layers_per_stage = {});

// OK when `stage`'s chunks are ordered, disjoint, non-empty ranges within
// `layers` blocks; else InvalidArgument starting with `what` (a family's
// field name).
absl::Status check_stage(const PipelineStage& stage, int64_t layers, absl::string_view what);

// How a model is split over ranks: its tensor-parallel group and its
// pipeline stage (the whole model: neither).
struct ModelSplit {
  TensorParallel tp;
  PipelineStage stage;
  // Whether a model declared so differs from the whole model on one rank.
  bool splits() const { return tp.enabled() || tp.all_to_all() || stage.count > 1; }
};

// What a family's model chunk runs through, in order: the stem where the
// chunk takes tokens (the token embedding and what follows it; null entries
// are skipped), children [first, end) of `blocks`, and the top where it gives
// logits (the final norm, the head). With the sequence split
// (TensorParallel::chunks_sequence) the blocks see this rank's positions:
// the stem's output is cut to them and their gradient padded back.
struct ChunkModules {
  std::vector<Module*> stem;
  Sequential* blocks = nullptr;
  size_t first = 0, end = 0;
  std::vector<Module*> top;
};
// Chunk `c` of `split`'s stage through `m` (families' forward_chunk and
// backward_chunk). InvalidArgument for a chunk the stage lacks, or a backward
// given another chunk's saved state.
absl::StatusOr<ForwardResult> forward_chunk_through(core::Context& ctx, const ModelSplit& split,
                                                    int c, const ChunkModules& m,
                                                    const core::Tensor& input);
absl::StatusOr<core::Tensor> backward_chunk_through(core::Context& ctx, const ModelSplit& split,
                                                    int c, const ChunkModules& m, Saved& saved,
                                                    const core::Tensor& grad_output);

class CausalLM : public Module {
 public:
  using Module::Module;

  // "gpt2", "llama": Hugging Face's model_type.
  virtual const char* family() const = 0;
  virtual core::DType dtype() const = 0;
  // The real vocabulary (token ids < vocab_size) and the logits' width.
  virtual int64_t vocab_size() const = 0;
  virtual int64_t padded_vocab_size() const = 0;
  // The longest sequence the model takes (position table or rope range).
  virtual int64_t max_seq_len() const = 0;
  virtual ParameterStore& store() = 0;
  virtual const ParameterStore& store() const = 0;
  const ParameterTable& table() const { return store().table(); }
  // The repeated layers, in order.
  virtual Sequential& blocks() = 0;
  // The shape Hugging Face gives `entry` (same name): the whole parameter's
  // (entry.global_shape: a tensor-parallel piece's whole) except the padded
  // vocabulary tables, which have vocab_size() rows there (ours are its first
  // rows, then zero padding).
  virtual core::Shape hugging_face_shape(const ParameterEntry& entry) const = 0;
  // Hugging Face's config.json of this model with weights of `dtype`
  // (model_type family(), so `transformers` loads the checkpoint).
  virtual std::string hugging_face_config_json(core::DType dtype) const = 0;
  // How this model is split: the tensor-parallel group its layers split
  // over (Megatron's 1D scheme: attention and MLP weights split,
  // nn/layers/tensor_parallel.h; its table then holds this rank's pieces,
  // TensorSplit) and the pipeline stage it runs (its table then holds that
  // stage's parameters only).
  virtual const ModelSplit& split() const = 0;
  const TensorParallel& tensor_parallel() const { return split().tp; }
  const PipelineStage& pipeline_stage() const { return split().stage; }
  // The number of blocks of the whole model, and their width (the hidden
  // states pipeline stages pass on: [B, T, hidden_size()]).
  virtual int64_t num_layers() const = 0;
  virtual int64_t hidden_size() const = 0;
  // Parameters both the first and the last pipeline stage hold (a tied
  // head's embedding weight): their gradients are summed between the two.
  virtual std::vector<std::string> tied_parameters() const = 0;
  // The same architecture declared anew with weights of `dtype`, no memory,
  // split as `split` says (InvalidArgument naming the sizes when heads or
  // widths do not divide by the tp group's size, or the stage's layers are
  // out of range).
  virtual absl::StatusOr<std::unique_ptr<CausalLM>> redeclare(core::DType dtype,
                                                              const ModelSplit& split) const = 0;
  // ... split as this model is.
  absl::StatusOr<std::unique_ptr<CausalLM>> redeclare(core::DType dtype) const {
    return redeclare(dtype, split());
  }
  // One line for logs: family, sizes, dtype.
  virtual std::string describe() const = 0;

  // The packed documents (nn/layers/documents.h) the next forwards and
  // backwards attend within, until set again; null: each row is one sequence
  // (the default). Whoever runs the model sets them before each micro-batch's
  // forward and again before its backward. Families that cannot attend within
  // documents (GPT-2: learned positions) take null only: Unimplemented
  // otherwise.
  virtual absl::Status set_documents(std::shared_ptr<const Documents> documents) {
    if (documents == nullptr) return absl::OkStatus();
    return absl::UnimplementedError(absl::StrCat(
        family(), " models attend across the documents packed into a row: train them with "
                  "document_attention = false (or packing = false)"));
  }

  // Model chunk `c` of this rank's pipeline stage as a Module of its own (the
  // interleaved schedule runs each chunk's forward and backward): its
  // forward takes tokens where pipeline_stage().takes_tokens(c), else hidden
  // states, and gives logits where gives_logits(c), else hidden states. It
  // declares nothing (its parameters are this model's). With one chunk the
  // model's own forward runs chunk 0; with several it is FailedPrecondition
  // (run the chunks). Errors: c out of range (InvalidArgument, from forward).
  Module& chunk(int c);
  // Whether `module` is one of chunk()'s views of this model.
  bool is_chunk(const Module& module) const;

  // The family's initialisation of every parameter, enqueued on `stream`:
  // store().initialize(seed, stream) (the table carries the init rules).
  absl::Status init(uint64_t seed, const core::Stream& stream = core::Stream::cpu()) {
    return store().initialize(seed, stream);
  }

  // The training loss of `logits` (this model's forward output) against
  // int32 `targets` [B, T]: mean cross-entropy over the real vocabulary
  // (nn/layers/cross_entropy.h) and, with options.gradient, dlogits for the
  // backward. Every caller computes the loss here, so a split model can
  // reduce across ranks: under tensor parallelism the logits are this rank's
  // vocabulary columns [B, T, padded_vocab / tp] (the head is vocabulary-
  // parallel) and the loss is nn::vocab_parallel_cross_entropy's, the same on
  // every rank.
  absl::StatusOr<CrossEntropyResult> loss(core::Context& ctx, const core::Tensor& logits,
                                          const core::Tensor& targets,
                                          const CrossEntropyOptions& options) const;

 protected:
  // Runs forward_chunk(ctx, 0, input), or fails with several chunks.
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;
  // The family's forward of chunk `c` (see chunk()); its backward takes the
  // saved state of that forward (InvalidArgument for another chunk's).
  virtual absl::StatusOr<ForwardResult> forward_chunk(core::Context& ctx, int c,
                                                      const core::Tensor& input) = 0;
  virtual absl::StatusOr<core::Tensor> backward_chunk(core::Context& ctx, int c, Saved& saved,
                                                      const core::Tensor& grad_output) = 0;

 private:
  class Chunk;
  std::map<int, std::unique_ptr<Module>> chunks_;  // chunk()'s views, made on first use
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_CAUSAL_LM_CAUSAL_LM_H_
