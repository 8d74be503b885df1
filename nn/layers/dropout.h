// colossal::nn — inverted dropout with a reproducible Philox mask
// (kernels/dropout).
//
//   training, p > 0:  y = x * mask / (1 - p),  mask[i] = 0 with probability p
//   evaluation or p = 0:  y = x  (the input tensor itself, no copy; no random
//                         numbers drawn)
//
// The mask comes from the context's counter-based stream: each training
// forward reserves x.numel() numbers (RngState r = ctx.next_offset(numel),
// core/context/context.h) and element i is decided by stream element
// r.offset + i of seed r.seed. So the same context state gives the same mask
// on the CPU and on CUDA (bit-identical outputs), and successive calls get
// fresh masks. The Saved context keeps only (seed, offset, p): backward
// regenerates the mask (dx = dy * mask / (1 - p)) instead of storing it, as
// Megatron-LM and Colossal-AI do, so dropout saves no activation memory (a
// stored uint8 mask would cost numel bytes per layer; regeneration costs one
// Philox evaluation per 4 elements, far below the kernel's memory traffic).
// Under activation checkpointing the recomputed forward replays the same
// offsets (nn/module/module.h), so gradients stay bit-identical.
//
// p in [0, 1); forward returns InvalidArgumentError otherwise. Any shape;
// dtypes float32, float16, bfloat16 and float64 on both devices. No parameters.
//
//   Dropout drop("transformer.drop", 0.1);
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, drop.forward(ctx, x));
//   model.set_training(false);   // evaluation: dropout is the identity
#ifndef COLOSSAL_NN_LAYERS_DROPOUT_H_
#define COLOSSAL_NN_LAYERS_DROPOUT_H_

#include <string>

#include "nn/module/module.h"

namespace colossal::nn {

class Dropout : public Module {
 public:
  Dropout(std::string name, double p) : Module(std::move(name)), p_(p) {}
  const char* type() const override { return "Dropout"; }
  double p() const { return p_; }

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  double p_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_DROPOUT_H_
