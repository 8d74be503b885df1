#include "nn/layers/embedding.h"

#include "absl/strings/str_cat.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "kernels/embedding/embedding.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct EmbeddingSaved : Saved {
  SavedStats stats() const override { return saved_stats({tokens}); }
  core::Tensor tokens;
};

absl::Status check_tokens(const core::Tensor& tokens, int64_t max_seq_len) {
  COLOSSAL_RETURN_IF_ERROR(require_dtype(tokens, core::DType::kI32, "tokens"));
  if (max_seq_len == 0 && tokens.rank() == 2) return absl::OkStatus();  // tokens only
  if (tokens.rank() != 2 || tokens.dim(1) > max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("tokens are ", tokens.to_string(),
                                                   "; expected [batch, T] with T <= ",
                                                   max_seq_len));
  }
  return absl::OkStatus();
}

}  // namespace

Embedding::Embedding(std::string name, int64_t vocab, int64_t max_seq_len, int64_t channels,
                     core::DType dtype, const TensorParallel& tp)
    : Module(std::move(name)),
      vocab_(vocab),
      max_seq_len_(max_seq_len),
      channels_(channels),
      dtype_(dtype),
      tp_(tp) {}

std::unique_ptr<Embedding> Embedding::tokens_only(std::string name, int64_t vocab,
                                                  int64_t channels, core::DType dtype,
                                                  const TensorParallel& tp) {
  return std::make_unique<Embedding>(std::move(name), vocab, /*max_seq_len=*/0, channels, dtype,
                                     tp);
}

std::string Embedding::wte_name() const {
  return max_seq_len_ == 0 ? name() + ".weight" : name() + ".wte.weight";
}

absl::Status Embedding::declare_own(ParameterTable& table) {
  COLOSSAL_RETURN_IF_ERROR(table.add(wte_name(), {vocab_, channels_}, dtype_,
                                     InitRule::normal(kDefaultInitStd), tp_.split(0)));
  if (max_seq_len_ == 0) return absl::OkStatus();
  return table.add(name() + ".wpe.weight", {max_seq_len_, channels_}, dtype_,
                   InitRule::normal(kDefaultInitStd));
}

absl::Status Embedding::bind_own(const ParameterStore& store) {
  COLOSSAL_ASSIGN_OR_RETURN(wte_, store.handle(wte_name()));
  if (max_seq_len_ == 0) return absl::OkStatus();
  COLOSSAL_ASSIGN_OR_RETURN(wpe_, store.handle(name() + ".wpe.weight"));
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> Embedding::forward_impl(core::Context& ctx,
                                                      const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "tokens"));
  COLOSSAL_RETURN_IF_ERROR(check_tokens(input, max_seq_len_));
  if (tp_.enabled()) return forward_vocab_parallel(ctx, input);
  const int64_t B = input.dim(0), T = input.dim(1);
  const int64_t max_seq_len = max_seq_len_ == 0 ? T : max_seq_len_;
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor wte, wte_.value());
  core::Tensor wpe;
  if (max_seq_len_ != 0) {
    COLOSSAL_ASSIGN_OR_RETURN(wpe, wpe_.value());
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, {B, T, channels_}, dtype_));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::embedding::embedding_forward_cpu(out.raw_data(), input.data<int32_t>(),
                                                    wte.raw_data(), wpe.raw_data(),
                                                    B, T, channels_, vocab_, max_seq_len, dtype_),
          kernels::embedding::embedding_forward_cuda(
              out.raw_data(), /*invalid_token_flag=*/nullptr, input.data<int32_t>(),
              wte.raw_data(), wpe.raw_data(), B, T, channels_, vocab_,
              max_seq_len, dtype_, cuda_stream(ctx))),
      "embedding forward"));
  auto saved = std::make_unique<EmbeddingSaved>();
  saved->tokens = input;
  return ForwardResult{out, std::move(saved)};
}

absl::StatusOr<core::Tensor> Embedding::backward_impl(core::Context& ctx, Saved& saved,
                                                      const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(EmbeddingSaved * s, saved_as<EmbeddingSaved>(saved));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(grad_output, dtype_, "grad_output"));
  const int64_t B = s->tokens.dim(0), T = s->tokens.dim(1);
  const int64_t max_seq_len = max_seq_len_ == 0 ? T : max_seq_len_;
  if (grad_output.shape() != core::Shape{B, T, channels_}) {
    return absl::InvalidArgumentError(absl::StrCat("grad_output is ", grad_output.to_string(),
                                                   "; expected [", B, ", ", T, ", ", channels_,
                                                   "]"));
  }
  if (tp_.enabled()) return backward_vocab_parallel(ctx, s->tokens, grad_output);
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dwte, wte_.grad());
  core::Tensor dwpe;  // undefined (null data) for tokens only
  if (max_seq_len_ != 0) {
    COLOSSAL_ASSIGN_OR_RETURN(dwpe, wpe_.grad());
  }
  using kernels::embedding::GradMode;
  const size_t scratch_bytes =
      ctx.device().is_cpu() ? 0
                            : kernels::embedding::embedding_backward_scratch_bytes(
                                  B, T, channels_, GradMode::kDeterministic);
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor work, scratch(ctx, scratch_bytes));
  (void)work;
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::embedding::embedding_backward_cpu(
              dwte.raw_data(), dwpe.raw_data(), grad_output.raw_data(),
              s->tokens.data<int32_t>(), B, T, channels_, vocab_, max_seq_len, dtype_, dtype_),
          kernels::embedding::embedding_backward_cuda(
              dwte.raw_data(), dwpe.raw_data(), /*invalid_token_flag=*/nullptr,
              grad_output.raw_data(), s->tokens.data<int32_t>(), work.raw_data(), scratch_bytes,
              B, T, channels_, vocab_, max_seq_len, dtype_, dtype_, GradMode::kDeterministic,
              cuda_stream(ctx))),
      "embedding backward"));
  return core::Tensor();
}

absl::StatusOr<core::Tensor> Embedding::positions(core::Context& ctx, int64_t B, int64_t T) {
  if (positions_.defined() && positions_.dim(0) == B && positions_.dim(1) == T &&
      positions_.device() == ctx.device()) {
    return positions_;
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host,
                            core::Tensor::empty({B, T}, core::DType::kI32, core::Stream::cpu()));
  for (int64_t i = 0; i < B * T; ++i) host.data<int32_t>()[i] = static_cast<int32_t>(i % T);
  COLOSSAL_ASSIGN_OR_RETURN(positions_, host.to(ctx.device(), ctx.compute_stream()));
  if (ctx.device().is_cuda()) ctx.compute_stream().synchronize();  // once per shape
  return positions_;
}

absl::StatusOr<ForwardResult> Embedding::forward_vocab_parallel(core::Context& ctx,
                                                                const core::Tensor& tokens) {
  const int64_t B = tokens.dim(0), T = tokens.dim(1), n = B * T;
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor wte, wte_.value());
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, {B, T, channels_}, dtype_));
  // This rank's rows (zeros where a token lies in another rank's), summed.
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::embedding::embedding_shard_forward_cpu(out.raw_data(), tokens.data<int32_t>(),
                                                          wte.raw_data(), n, channels_,
                                                          local_vocab(), vocab_start(), dtype_),
          kernels::embedding::embedding_shard_forward_cuda(
              out.raw_data(), tokens.data<int32_t>(), wte.raw_data(), n, channels_,
              local_vocab(), vocab_start(), dtype_, cuda_stream(ctx))),
      "vocabulary-parallel embedding forward"));
  COLOSSAL_RETURN_IF_ERROR(all_reduce_sum(ctx, tp_, out, "the embedding's rows"));
  if (max_seq_len_ != 0) {
    // + wpe[t]: the position table looked up as a token-only table.
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor wpe, wpe_.value());
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor ids, positions(ctx, B, T));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor pos, empty(ctx, {B, T, channels_}, dtype_));
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        COLOSSAL_NN_ON_DEVICE(
            ctx,
            kernels::embedding::embedding_shard_forward_cpu(pos.raw_data(), ids.data<int32_t>(),
                                                            wpe.raw_data(), n, channels_,
                                                            max_seq_len_, 0, dtype_),
            kernels::embedding::embedding_shard_forward_cuda(
                pos.raw_data(), ids.data<int32_t>(), wpe.raw_data(), n, channels_, max_seq_len_, 0,
                dtype_, cuda_stream(ctx))),
        "position embedding forward"));
    COLOSSAL_ASSIGN_OR_RETURN(out, core::ops::add(ctx, out, pos));
  }
  auto saved = std::make_unique<EmbeddingSaved>();
  saved->tokens = tokens;
  return ForwardResult{out, std::move(saved)};
}

absl::StatusOr<core::Tensor> Embedding::backward_vocab_parallel(core::Context& ctx,
                                                                const core::Tensor& tokens,
                                                                const core::Tensor& grad_output) {
  const int64_t B = tokens.dim(0), T = tokens.dim(1), n = B * T;
  using kernels::embedding::GradMode;
  const auto shard_backward = [&](const core::Tensor& grad, const core::Tensor& dout,
                                  const core::Tensor& ids, int64_t rows, int64_t start,
                                  const char* what) -> absl::Status {
    const size_t bytes = ctx.device().is_cpu() ? 0
                                               : kernels::embedding::embedding_shard_backward_scratch_bytes(
                                                     n, channels_, GradMode::kDeterministic);
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor work, scratch(ctx, bytes));
    return core::from_kernel_status(
        COLOSSAL_NN_ON_DEVICE(
            ctx,
            kernels::embedding::embedding_shard_backward_cpu(grad.raw_data(), dout.raw_data(),
                                                             ids.data<int32_t>(), n, channels_, rows,
                                                             start, dtype_, dtype_),
            kernels::embedding::embedding_shard_backward_cuda(
                grad.raw_data(), dout.raw_data(), ids.data<int32_t>(), work.raw_data(), bytes, n,
                channels_, rows, start, dtype_, dtype_, GradMode::kDeterministic,
                cuda_stream(ctx))),
        what);
  };
  if (max_seq_len_ != 0) {
    // wpe: this rank's gradient as given (with sequence parallelism, its
    // positions' part: a partial sum like every whole parameter's).
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dwpe, wpe_.grad());
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor ids, positions(ctx, B, T));
    COLOSSAL_RETURN_IF_ERROR(
        shard_backward(dwpe, grad_output, ids, max_seq_len_, 0, "position embedding backward"));
  }
  // wte's rows serve every position: with sequence parallelism each rank's
  // gradient holds its positions only, so they are summed first.
  core::Tensor dout = grad_output;
  if (tp_.splits_sequence()) {
    COLOSSAL_ASSIGN_OR_RETURN(dout, empty(ctx, grad_output.shape(), dtype_));
    COLOSSAL_RETURN_IF_ERROR(dout.copy_from(grad_output, ctx.compute_stream()));
    COLOSSAL_RETURN_IF_ERROR(all_reduce_sum(ctx, tp_, dout, "the embedding's gradient"));
  }
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dwte, wte_.grad());
  COLOSSAL_RETURN_IF_ERROR(shard_backward(dwte, dout, tokens, local_vocab(), vocab_start(),
                                          "vocabulary-parallel embedding backward"));
  return core::Tensor();
}

}  // namespace colossal::nn
