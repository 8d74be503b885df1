#include "nn/models/causal_lm/causal_lm.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/layers/tensor_util.h"
#include "nn/layers/vocab_parallel_loss.h"

namespace colossal::nn {

absl::StatusOr<PipelineStage> pipeline_stage(int64_t layers, int count, int index, int chunks,
                                             absl::Span<const int64_t> layers_per_stage) {
  if (count < 1 || index < 0 || index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline stage ", index, " of ", count, " does not exist"));
  }
  if (chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a pipeline stage has at least one model chunk (num_model_chunks), not ",
                     chunks));
  }
  const int64_t virtual_stages = int64_t{count} * chunks;
  if (layers < virtual_stages) {
    return absl::InvalidArgumentError(
        chunks == 1 ? absl::StrCat("the model's ", layers, " layers do not fill ", count,
                                   " pipeline stages (pp_size)")
                    : absl::StrCat("the model's ", layers, " layers do not fill ", count,
                                   " pipeline stages (pp_size) x ", chunks,
                                   " model chunks (num_model_chunks)"));
  }
  std::vector<int64_t> per(virtual_stages, layers / virtual_stages);
  if (!layers_per_stage.empty()) {
    if (static_cast<int64_t>(layers_per_stage.size()) != virtual_stages) {
      return absl::InvalidArgumentError(absl::StrCat(
          "num_layers_per_stage has ", layers_per_stage.size(), " entries; ", count,
          " pipeline stages x ", chunks, " model chunks take ", virtual_stages));
    }
    int64_t sum = 0;
    for (int64_t n : layers_per_stage) {
      if (n < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "num_layers_per_stage: every virtual stage takes at least one layer, got ", n));
      }
      sum += n;
    }
    if (sum != layers) {
      return absl::InvalidArgumentError(absl::StrCat("num_layers_per_stage sums to ", sum,
                                                     "; the model has ", layers, " layers"));
    }
    per.assign(layers_per_stage.begin(), layers_per_stage.end());
  } else {
    const int64_t remainder = layers % virtual_stages;
    const int64_t start = virtual_stages / 2 - remainder / 2;
    for (int64_t i = start; i < start + remainder; ++i) ++per[i];
  }
  PipelineStage s;
  s.index = index;
  s.count = count;
  s.chunks.clear();
  int64_t first = 0;
  for (int64_t v = 0; v < virtual_stages; ++v) {
    if (v % count == index) s.chunks.push_back({first, first + per[v]});
    first += per[v];
  }
  return s;
}

absl::Status check_stage(const PipelineStage& stage, int64_t layers, absl::string_view what) {
  if (stage.count < 1 || stage.index < 0 || stage.index >= stage.count || stage.chunks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline stage ", stage.index, " of ",
                                                   stage.count, " with ", stage.chunks.size(),
                                                   " model chunks does not exist"));
  }
  int64_t previous_end = 0;
  for (const LayerRange& r : stage.chunks) {
    const int64_t end = r.end < 0 ? layers : r.end;
    if (r.first < previous_end || end > layers || r.first >= end) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is ", layers, "; pipeline stage ", stage.index, " of ",
                       stage.count, " asks for layers [", r.first, ", ", end, ")"));
    }
    previous_end = end;
  }
  return absl::OkStatus();
}

namespace {

absl::Status check_chunk(const PipelineStage& stage, int c) {
  if (c >= 0 && c < stage.num_chunks()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("model chunk ", c, " of pipeline stage ",
                                                 stage.index, ", which has ", stage.num_chunks()));
}

struct ChunkSaved : Saved {
  SavedStats stats() const override {
    SavedStats total = saved_stats({}, {blocks.get()});
    for (const auto* part : {&stem, &top}) {
      for (const auto& s : *part) {
        const SavedStats one = saved_stats({}, {s.get()});
        total.tensors += one.tensors;
        total.bytes += one.bytes;
      }
    }
    return total;
  }
  int chunk = 0;  // the pipeline stage's model chunk that ran
  std::vector<std::unique_ptr<Saved>> stem, top;  // one per module run (null entries skipped)
  std::unique_ptr<Saved> blocks;
};

// Runs `modules` (skipping null ones) forward from x, keeping their saved states.
absl::Status forward_each(core::Context& ctx, const std::vector<Module*>& modules, core::Tensor& x,
                          std::vector<std::unique_ptr<Saved>>& saved) {
  for (Module* m : modules) {
    if (m == nullptr) continue;
    COLOSSAL_ASSIGN_OR_RETURN(ForwardResult r, m->forward(ctx, x));
    saved.push_back(std::move(r.saved));
    x = r.output;
  }
  return absl::OkStatus();
}

// Their backward, in reverse order.
absl::Status backward_each(core::Context& ctx, const std::vector<Module*>& modules,
                           std::vector<std::unique_ptr<Saved>>& saved, core::Tensor& dx) {
  std::vector<Module*> ran;
  for (Module* m : modules) {
    if (m != nullptr) ran.push_back(m);
  }
  if (ran.size() != saved.size()) {
    return absl::InvalidArgumentError("the saved activations are from another model");
  }
  for (size_t i = ran.size(); i-- > 0;) {
    COLOSSAL_ASSIGN_OR_RETURN(dx, ran[i]->backward(ctx, *saved[i], dx));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ForwardResult> forward_chunk_through(core::Context& ctx, const ModelSplit& split,
                                                    int c, const ChunkModules& m,
                                                    const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(check_chunk(split.stage, c));
  const bool tokens = split.stage.takes_tokens(c), logits = split.stage.gives_logits(c);
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, tokens ? "tokens" : "hidden states"));
  auto saved = std::make_unique<ChunkSaved>();
  saved->chunk = c;
  core::Tensor x = input;
  if (tokens) {
    COLOSSAL_RETURN_IF_ERROR(forward_each(ctx, m.stem, x, saved->stem));
    // Sequence parallelism: the blocks see this rank's positions.
    if (split.tp.chunks_sequence()) {
      COLOSSAL_ASSIGN_OR_RETURN(x, sequence_chunk(ctx, split.tp, x));
    }
  }
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult h, m.blocks->forward_range(ctx, m.first, m.end, x));
  saved->blocks = std::move(h.saved);
  x = h.output;
  if (logits) COLOSSAL_RETURN_IF_ERROR(forward_each(ctx, m.top, x, saved->top));
  return ForwardResult{x, std::move(saved)};
}

absl::StatusOr<core::Tensor> backward_chunk_through(core::Context& ctx, const ModelSplit& split,
                                                    int c, const ChunkModules& m, Saved& saved,
                                                    const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(check_chunk(split.stage, c));
  const bool tokens = split.stage.takes_tokens(c), logits = split.stage.gives_logits(c);
  COLOSSAL_RETURN_IF_ERROR(
      require_device(ctx, grad_output, logits ? "dlogits" : "the output gradient"));
  auto* s = dynamic_cast<ChunkSaved*>(&saved);
  if (s == nullptr) {
    return absl::InvalidArgumentError("the saved activations are not a model chunk's");
  }
  if (s->chunk != c) {
    return absl::InvalidArgumentError(absl::StrCat("the backward of model chunk ", c,
                                                   " got the saved activations of chunk ",
                                                   s->chunk));
  }
  core::Tensor dx = grad_output;
  if (logits) COLOSSAL_RETURN_IF_ERROR(backward_each(ctx, m.top, s->top, dx));
  COLOSSAL_ASSIGN_OR_RETURN(dx, m.blocks->backward_range(ctx, *s->blocks, dx));
  if (!tokens) return dx;
  if (split.tp.chunks_sequence()) {
    COLOSSAL_ASSIGN_OR_RETURN(dx, pad_sequence(ctx, split.tp, dx));
  }
  COLOSSAL_RETURN_IF_ERROR(backward_each(ctx, m.stem, s->stem, dx));
  return dx;
}

// One model chunk of a CausalLM as a Module: forward and backward are the
// model's forward_chunk / backward_chunk.
class CausalLM::Chunk : public Module {
 public:
  Chunk(CausalLM& model, int c)
      : Module(absl::StrCat(model.name(), ".chunk", c)), model_(model), c_(c) {}
  const char* type() const override { return "CausalLMChunk"; }
  const CausalLM& model() const { return model_; }

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx,
                                             const core::Tensor& input) override {
    return model_.forward_chunk(ctx, c_, input);
  }
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override {
    return model_.backward_chunk(ctx, c_, saved, grad_output);
  }

 private:
  CausalLM& model_;
  const int c_;
};

Module& CausalLM::chunk(int c) {
  // Out-of-range views exist too, so that their forward says what is wrong.
  std::unique_ptr<Module>& view = chunks_[c];
  if (view == nullptr) view = std::make_unique<Chunk>(*this, c);
  return *view;
}

bool CausalLM::is_chunk(const Module& module) const {
  const auto* c = dynamic_cast<const Chunk*>(&module);
  return c != nullptr && &c->model() == this;
}

absl::StatusOr<ForwardResult> CausalLM::forward_impl(core::Context& ctx,
                                                     const core::Tensor& input) {
  if (pipeline_stage().num_chunks() != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this pipeline stage has ", pipeline_stage().num_chunks(),
        " model chunks (the interleaved schedule): run each through chunk(c), not the model"));
  }
  return forward_chunk(ctx, 0, input);
}

absl::StatusOr<core::Tensor> CausalLM::backward_impl(core::Context& ctx, Saved& saved,
                                                     const core::Tensor& grad_output) {
  if (pipeline_stage().num_chunks() != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this pipeline stage has ", pipeline_stage().num_chunks(),
        " model chunks (the interleaved schedule): run each through chunk(c), not the model"));
  }
  return backward_chunk(ctx, 0, saved, grad_output);
}

namespace {

// all_to_all sequence parallelism: `logits` are this rank's positions (and
// with tensor parallelism its vocabulary columns), every rank holds the whole
// `targets`. Each rank's mean over its counted positions
// is weighted by its share of the sequence group's (so the group's sum is the
// mean over every counted position), its gradient by that share times the
// group's size (the plugin averages gradients over it).
absl::StatusOr<CrossEntropyResult> sequence_chunk_cross_entropy(
    core::Context& ctx, const TensorParallel& tp, const core::Tensor& logits,
    const core::Tensor& targets, int64_t vocab, const CrossEntropyOptions& options) {
  if (targets.rank() != 2 || targets.dtype() != core::DType::kI32 ||
      targets.dim(1) % tp.sequence_size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence-parallel loss: targets ", targets.to_string(), " are not int32 [B, T] with T ",
        "divisible by sp_size ", tp.sequence_size()));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, targets.to(core::Device::cpu(), ctx.compute_stream()));
  ctx.compute_stream().synchronize();
  const int64_t B = targets.dim(0), T = targets.dim(1), Tc = T / tp.sequence_size();
  const int64_t first = tp.sequence_rank() * Tc;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor mine,
                            core::Tensor::empty({B, Tc}, core::DType::kI32, core::Stream::cpu()));
  int64_t counted = 0, counted_here = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t y = host.data<int32_t>()[b * T + t];
      const bool here = t >= first && t < first + Tc;
      if (here) mine.data<int32_t>()[b * Tc + t - first] = y;
      if (y == options.ignore_index) continue;
      ++counted;
      if (here) ++counted_here;
    }
  }
  const double share = counted > 0 ? static_cast<double>(counted_here) / counted : 0.0;
  if (ctx.device().is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(mine, mine.to(ctx.device(), ctx.compute_stream()));
  }
  CrossEntropyOptions o = options;
  o.dloss = static_cast<float>(options.dloss * share * tp.sequence_size());
  // With tensor parallelism the head gives this rank's vocabulary columns of
  // its positions: the tp group's ranks share the positions and the loss.
  COLOSSAL_ASSIGN_OR_RETURN(CrossEntropyResult r,
                            tp.enabled()
                                ? vocab_parallel_cross_entropy(ctx, tp, logits, mine, vocab, o)
                                : cross_entropy(ctx, logits, mine, vocab, o));
  COLOSSAL_ASSIGN_OR_RETURN(const double total, sum_over_sequence(ctx, tp, r.loss * share));
  r.loss = static_cast<float>(total);
  return r;
}

}  // namespace

absl::StatusOr<CrossEntropyResult> CausalLM::loss(core::Context& ctx, const core::Tensor& logits,
                                                  const core::Tensor& targets,
                                                  const CrossEntropyOptions& options) const {
  const TensorParallel& tp = tensor_parallel();
  if (tp.all_to_all()) {
    return sequence_chunk_cross_entropy(ctx, tp, logits, targets, vocab_size(), options);
  }
  // Split models' heads give this rank's vocabulary columns of every position.
  if (tp.enabled())
    return vocab_parallel_cross_entropy(ctx, tp, logits, targets, vocab_size(), options);
  return cross_entropy(ctx, logits, targets, vocab_size(), options);
}

}  // namespace colossal::nn
