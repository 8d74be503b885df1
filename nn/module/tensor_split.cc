#include "nn/module/tensor_split.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype/dtype.h"
#include "core/status/status.h"

namespace colossal::nn {
namespace {

// Checks the two tensors, then copies each run: piece -> whole when `into`.
absl::Status copy_runs(const ParameterEntry& entry, const core::Tensor& piece,
                       const core::Tensor& whole, bool into) {
  const auto bad = [&](const char* what, const core::Tensor& t, int64_t numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter \"", entry.name, "\": the ", what, " is ", t.to_string(),
                     "; expected ", numel, " host elements of ", core::dtype_name(entry.dtype)));
  };
  const int64_t whole_numel = entry.global_shape.numel();
  if (!piece.defined() || piece.numel() != entry.numel() || piece.dtype() != entry.dtype ||
      piece.device().is_cuda()) {
    return bad("piece", piece, entry.numel());
  }
  if (!whole.defined() || whole.numel() != whole_numel || whole.dtype() != entry.dtype ||
      whole.device().is_cuda()) {
    return bad("whole tensor", whole, whole_numel);
  }
  const size_t es = core::dtype_size(entry.dtype);
  char* p = static_cast<char*>(piece.raw_data());
  char* w = static_cast<char*>(whole.raw_data());
  for (const SplitRun& r : split_runs(entry)) {
    char* a = p + r.local * es;
    char* b = w + r.global * es;
    if (into) {
      std::memcpy(b, a, r.count * es);
    } else {
      std::memcpy(a, b, r.count * es);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParameterTable> whole_table(const ParameterTable& table) {
  ParameterTable whole;
  for (const ParameterEntry& e : table.entries()) {
    COLOSSAL_RETURN_IF_ERROR(whole.add(e.name, e.global_shape, e.dtype, e.init));
  }
  return whole;
}

absl::Status copy_piece_from_whole(const ParameterEntry& entry, const core::Tensor& whole,
                                   const core::Tensor& piece) {
  return copy_runs(entry, piece, whole, /*into=*/false);
}

absl::Status copy_piece_into_whole(const ParameterEntry& entry, const core::Tensor& piece,
                                   const core::Tensor& whole) {
  return copy_runs(entry, piece, whole, /*into=*/true);
}

absl::StatusOr<core::Tensor> piece_of_whole(const ParameterEntry& entry, const core::Tensor& whole) {
  const std::vector<SplitRun> runs = split_runs(entry);
  if (runs.size() == 1 && runs[0].count == entry.numel() && whole.defined() &&
      whole.numel() == entry.global_shape.numel() && whole.dtype() == entry.dtype &&
      !whole.device().is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, whole.reshape({whole.numel()}));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor run, flat.slice(runs[0].global, runs[0].global + runs[0].count));
    return run.reshape(entry.shape.dims());
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor piece,
                            core::Tensor::empty(entry.shape, entry.dtype, core::Stream::cpu()));
  COLOSSAL_RETURN_IF_ERROR(copy_piece_from_whole(entry, whole, piece));
  return piece;
}

ParameterEntry entry_of_part(const ParameterEntry& entry, int index) {
  ParameterEntry e = entry;
  e.split.index = index;
  return e;
}

}  // namespace colossal::nn
