// CausalSelfAttention on CUDA in bfloat16 and float16: the fused path
// (kernels/attention) and the forced explicit path against the CPU float32
// reference on the same (rounded) weights and inputs: output, input gradient
// and every parameter gradient. Skips without a GPU.
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/context/context.h"
#include "gtest/gtest.h"
#include "kernels/common/half.h"
#include "nn/layers/attention.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"
#include "tests/util/gpu_test.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

TEST(AttentionEnvTest, ParsesColossalAttention) {
  ASSERT_EQ(setenv("COLOSSAL_ATTENTION", "explicit", 1), 0);
  EXPECT_EQ(*attention_impl_from_env(), AttentionImpl::kExplicit);
  ASSERT_EQ(setenv("COLOSSAL_ATTENTION", "auto", 1), 0);
  EXPECT_EQ(*attention_impl_from_env(), AttentionImpl::kAuto);
  ASSERT_EQ(setenv("COLOSSAL_ATTENTION", "flash", 1), 0);
  EXPECT_EQ(attention_impl_from_env().status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(unsetenv("COLOSSAL_ATTENTION"), 0);
  EXPECT_EQ(*attention_impl_from_env(), AttentionImpl::kAuto);
}

#if COLOSSAL_WITH_CUDA
// Values rounded to `dtype` (bf16 / fp16), as floats.
float round_to(DType dtype, float v) {
  return dtype == DType::kBF16 ? kernels::to_float(kernels::from_float<kernels::BFloat16>(v))
                               : kernels::to_float(kernels::from_float<kernels::Half>(v));
}

// A host float32 tensor of `values` as a tensor of `dtype` on `stream`'s device.
Tensor make(const std::vector<float>& values, const core::Shape& shape, DType dtype,
            const core::Stream& stream) {
  Tensor h = *Tensor::empty(shape, dtype, core::Stream::cpu());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      h.data<float>()[i] = values[i];
    } else if (dtype == DType::kBF16) {
      h.data<kernels::BFloat16>()[i] = kernels::from_float<kernels::BFloat16>(values[i]);
    } else {
      h.data<kernels::Half>()[i] = kernels::from_float<kernels::Half>(values[i]);
    }
  }
  return *h.to(stream.device(), stream);
}

std::vector<float> floats(const Tensor& t, const core::Stream& stream) {
  Tensor h = *t.to(core::Device::cpu(), stream);
  stream.synchronize();
  std::vector<float> out(h.numel());
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (h.dtype() == DType::kF32) {
      out[i] = h.data<float>()[i];
    } else if (h.dtype() == DType::kBF16) {
      out[i] = kernels::to_float(h.data<kernels::BFloat16>()[i]);
    } else {
      out[i] = kernels::to_float(h.data<kernels::Half>()[i]);
    }
  }
  return out;
}

// max |a - b| / max |b|.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < b.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / scale;
}

struct PathResult {
  std::vector<float> out, dx;
  std::vector<std::vector<float>> grads;  // table order
  int64_t saved_bytes = 0;
};

// Binds `attn` to a fresh store on ctx's device filled with `weights` (one
// vector per parameter, table order), runs forward and backward.
PathResult run(core::Context& ctx, CausalSelfAttention& attn, DType dtype,
        const std::vector<std::vector<float>>& weights, const std::vector<float>& x,
        const std::vector<float>& dout, const core::Shape& shape) {
  const core::Stream& stream = ctx.compute_stream();
  ParameterTable table;
  EXPECT_TRUE(attn.declare(table).ok());
  ParameterStore store = *ParameterStore::create(table, stream);
  EXPECT_TRUE(attn.bind(store).ok());
  const std::vector<Parameter>& params = store.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor value = params[i].value;  // a view into the store
    EXPECT_TRUE(value.copy_from(make(weights[i], value.shape(), dtype, stream), stream).ok());
  }
  PathResult r;
  absl::StatusOr<ForwardResult> out = attn.forward(ctx, make(x, shape, dtype, stream));
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return r;
  r.saved_bytes = out->saved->stats().bytes;
  absl::StatusOr<Tensor> dx = attn.backward(ctx, *out->saved, make(dout, shape, dtype, stream));
  EXPECT_TRUE(dx.ok()) << dx.status();
  if (!dx.ok()) return r;
  ctx.synchronize();
  r.out = floats(out->output, stream);
  r.dx = floats(*dx, stream);
  for (const Parameter& p : params) r.grads.push_back(floats(p.grad, stream));
  return r;
}
#endif

TEST(AttentionCudaTest, FusedAndExplicitMatchCpuFloat32) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  ASSERT_EQ(unsetenv("COLOSSAL_ATTENTION"), 0);
  auto cpu_ctx = std::move(*core::Context::create(core::Device::cpu()));
  absl::StatusOr<std::unique_ptr<core::Context>> gpu = core::Context::create(core::Device::cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t hs : {64, 128}) {
      const int64_t NH = 2, C = NH * hs, B = 2, T = 77;
      SCOPED_TRACE(std::string(core::dtype_name(dtype)) + " hs=" + std::to_string(hs));
      std::mt19937 rng(static_cast<uint32_t>(hs));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      auto random = [&](size_t n, float sd) {
        std::vector<float> v(n);
        for (float& e : v) e = round_to(dtype, sd * normal(rng));
        return v;
      };
      CausalSelfAttention cpu_attn("attn", C, NH, DType::kF32);
      ParameterTable table;
      ASSERT_TRUE(cpu_attn.declare(table).ok());
      std::vector<std::vector<float>> weights;
      for (const ParameterEntry& e : table.entries()) {
        weights.push_back(random(e.shape.numel(), 1.0f / std::sqrt(static_cast<float>(C))));
      }
      const core::Shape shape{B, T, C};
      const std::vector<float> x = random(B * T * C, 1.0f), dout = random(B * T * C, 1.0f);

      const PathResult ref = run(*cpu_ctx, cpu_attn, DType::kF32, weights, x, dout, shape);
      CausalSelfAttention gpu_attn("attn", C, NH, dtype);
      const PathResult fused = run(**gpu, gpu_attn, dtype, weights, x, dout, shape);
      gpu_attn.set_impl(AttentionImpl::kExplicit);
      const PathResult explicit_run = run(**gpu, gpu_attn, dtype, weights, x, dout, shape);
      ASSERT_FALSE(ref.out.empty() || fused.out.empty() || explicit_run.out.empty());
      // The fused path keeps no [B*NH, T, T] probabilities.
      EXPECT_LT(fused.saved_bytes + B * NH * T * T, explicit_run.saved_bytes);

      // Several roundings to 8 (bf16) / 11 (fp16) significant bits in a chain
      // of GEMMs; both CUDA paths must land as close to float32 as each other.
      const double tol = dtype == DType::kBF16 ? 6e-2 : 1.5e-2;
      for (const PathResult* r : {&fused, &explicit_run}) {
        const char* which = r == &fused ? "fused" : "explicit";
        EXPECT_LT(relative_difference(r->out, ref.out), tol) << which << " output";
        EXPECT_LT(relative_difference(r->dx, ref.dx), tol) << which << " dx";
        ASSERT_EQ(r->grads.size(), ref.grads.size());
        for (size_t i = 0; i < ref.grads.size(); ++i) {
          EXPECT_LT(relative_difference(r->grads[i], ref.grads[i]), tol)
              << which << " " << table.entries()[i].name;
        }
      }
    }
  }
#endif
}

}  // namespace
}  // namespace colossal::nn
