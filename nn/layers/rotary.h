// colossal::nn — the rotary embedding's frequency table (Llama's RoPE), built
// once per model and shared by its attention layers.
//
// inv_freq[i] = 1 / theta^(2i / D) for i < D / 2, with Llama-3's rope scaling
// when given (kernels/rope: rope_inv_freq). It lives on the host; the first use
// on a CUDA device copies it there (one float32 [D / 2] tensor per device).
//
//   COLOSSAL_ASSIGN_OR_RETURN(auto table, RotaryTable::create(64, 500000.0, &scaling));
//   COLOSSAL_ASSIGN_OR_RETURN(core::Tensor inv_freq, table->on_device(ctx));
#ifndef COLOSSAL_NN_LAYERS_ROTARY_H_
#define COLOSSAL_NN_LAYERS_ROTARY_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "kernels/rope/rope.h"

namespace colossal::nn {

class RotaryTable {
 public:
  // InvalidArgumentError for an odd or non-positive head_dim, theta <= 0, or
  // scaling the kernel rejects.
  static absl::StatusOr<std::shared_ptr<RotaryTable>> create(
      int64_t head_dim, double theta,
      const std::optional<kernels::rope::Llama3RopeScaling>& llama3);

  int64_t head_dim() const { return head_dim_; }
  // float32 [head_dim / 2] on ctx's device (the host table on the CPU).
  absl::StatusOr<core::Tensor> on_device(core::Context& ctx);

 private:
  RotaryTable() = default;
  int64_t head_dim_ = 0;
  core::Tensor host_;
  std::mutex mu_;
  std::vector<core::Tensor> device_;  // copies, one per device used
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_ROTARY_H_
