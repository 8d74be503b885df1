#include "nn/layers/embedding.h"

#include "absl/strings/str_cat.h"
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
                     core::DType dtype)
    : Module(std::move(name)),
      vocab_(vocab),
      max_seq_len_(max_seq_len),
      channels_(channels),
      dtype_(dtype) {}

std::unique_ptr<Embedding> Embedding::tokens_only(std::string name, int64_t vocab,
                                                  int64_t channels, core::DType dtype) {
  return std::make_unique<Embedding>(std::move(name), vocab, /*max_seq_len=*/0, channels, dtype);
}

std::string Embedding::wte_name() const {
  return max_seq_len_ == 0 ? name() + ".weight" : name() + ".wte.weight";
}

absl::Status Embedding::declare_own(ParameterTable& table) {
  COLOSSAL_RETURN_IF_ERROR(
      table.add(wte_name(), {vocab_, channels_}, dtype_, InitRule::normal(kDefaultInitStd)));
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

}  // namespace colossal::nn
