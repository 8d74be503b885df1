#include "nn/layers/documents.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::nn {

absl::StatusOr<std::shared_ptr<const Documents>> Documents::from_positions(
    core::Context& ctx, const core::Tensor& positions) {
  if (positions.dtype() != core::DType::kI32 || positions.rank() != 2 || !positions.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("documents: positions are ", positions.to_string(), "; expected int32 [B, T] on the host"));
  }
  auto docs = std::make_shared<Documents>();
  docs->batch = positions.dim(0);
  docs->seq = positions.dim(1);
  const int64_t B = docs->batch, T = docs->seq;
  if (B * T >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("documents: ", B, " x ", T, " tokens, past 2^31"));
  }
  const int32_t* p = positions.data<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t want = t == 0 ? 0 : p[b * T + t - 1] + 1;
      const int32_t got = p[b * T + t];
      if (got == 0) {
        docs->cu_seqlens_host.push_back(static_cast<int32_t>(b * T + t));
      } else if (got != want) {
        return absl::InvalidArgumentError(
            absl::StrCat("documents: row ", b, " position ", t, " is ", got, "; expected 0 (a document's first "
                         "token) or ", want, " (the next token of the one before)"));
      }
    }
  }
  docs->cu_seqlens_host.push_back(static_cast<int32_t>(B * T));
  for (size_t i = 0; i + 1 < docs->cu_seqlens_host.size(); ++i) {
    docs->max_seqlen = std::max<int64_t>(docs->max_seqlen, docs->cu_seqlens_host[i + 1] - docs->cu_seqlens_host[i]);
  }
  // Asynchronous copies: the host tensors stay with the documents (the
  // loader's positions may be pinned memory it would otherwise hand out again).
  const core::Stream& stream = ctx.compute_stream();
  docs->host_positions_ = positions;
  COLOSSAL_ASSIGN_OR_RETURN(docs->positions, positions.to(ctx.device(), stream));
  COLOSSAL_ASSIGN_OR_RETURN(docs->host_cu_seqlens_,
                            core::Tensor::empty({static_cast<int64_t>(docs->cu_seqlens_host.size())},
                                                core::DType::kI32, core::Stream::cpu()));
  std::copy(docs->cu_seqlens_host.begin(), docs->cu_seqlens_host.end(), docs->host_cu_seqlens_.data<int32_t>());
  COLOSSAL_ASSIGN_OR_RETURN(docs->cu_seqlens, docs->host_cu_seqlens_.to(ctx.device(), stream));
  return std::shared_ptr<const Documents>(std::move(docs));
}

}  // namespace colossal::nn
