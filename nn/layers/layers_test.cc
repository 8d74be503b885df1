// Finite-difference (float64) gradient checks of every layer, a few forward
// values by hand, and the loss head.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/ops/elementwise.h"
#include "gtest/gtest.h"
#include "nn/layers/attention.h"
#include "nn/layers/block.h"
#include "nn/layers/cross_entropy.h"
#include "nn/layers/embedding.h"
#include "nn/layers/gelu.h"
#include "nn/layers/layernorm.h"
#include "nn/layers/linear.h"
#include "nn/layers/mlp.h"
#include "nn/layers/rmsnorm.h"
#include "nn/layers/tensor_util.h"
#include "nn/module/gradcheck.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

class LayersTest : public ::testing::Test {
 protected:
  void SetUp() override { ctx_ = std::move(*core::Context::create(core::Device::cpu())); }

  // Parameters N(0, 0.5); LayerNorm weights 1 + N(0, 0.5).
  static ParameterStore make_store(Module& m, uint64_t seed = 7) {
    return random_parameters(m, seed, [](const std::string& name) {
      return name.find("ln") != std::string::npos && name.find(".weight") != std::string::npos;
    });
  }

  static Tensor random(const core::Shape& shape, uint64_t seed, DType dtype = DType::kF64) {
    return random_normal(shape, seed, dtype);
  }

  void expect_gradcheck(Module& m, const Tensor& x, double tol = 1e-6) {
    ParameterStore store = make_store(m);
    absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, m, store, x, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->checked, 0);
    EXPECT_LT(r->max_error, tol) << m.description() << ": " << r->worst;
  }

  std::unique_ptr<core::Context> ctx_;
};

TEST_F(LayersTest, LinearForwardByHand) {
  Linear fc("fc", 2, 3, {.dtype = DType::kF32});
  ParameterTable table;
  ASSERT_TRUE(fc.declare(table).ok());
  ASSERT_EQ(table.find("fc.weight")->shape, core::Shape({2, 3}));  // [in, out]: HF Conv1D
  ParameterStore store = *ParameterStore::create(table, core::Stream::cpu());
  ASSERT_TRUE(fc.bind(store).ok());
  float* w = store.find("fc.weight")->value.data<float>();
  for (int i = 0; i < 6; ++i) w[i] = static_cast<float>(i + 1);  // [[1,2,3],[4,5,6]]
  float* b = store.find("fc.bias")->value.data<float>();
  b[0] = 0.5f;
  Tensor x = *Tensor::empty({1, 1, 2}, DType::kF32, core::Stream::cpu());
  x.data<float>()[0] = 1;
  x.data<float>()[1] = 2;
  absl::StatusOr<ForwardResult> y = fc.forward(*ctx_, x);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->output.shape(), core::Shape({1, 1, 3}));
  EXPECT_FLOAT_EQ(y->output.data<float>()[0], 9.5f);
  EXPECT_FLOAT_EQ(y->output.data<float>()[2], 15.0f);
}

TEST_F(LayersTest, LinearGradients) {
  Linear a("a", 5, 3, {.dtype = DType::kF64});
  expect_gradcheck(a, random({2, 3, 5}, 1));
  Linear b("b", 4, 6, {.bias = false, .layout = WeightLayout::kOutIn, .dtype = DType::kF64});
  expect_gradcheck(b, random({7, 4}, 2));
}

TEST_F(LayersTest, LinearRejectsWrongInput) {
  Linear a("a", 5, 3, {.dtype = DType::kF64});
  make_store(a);
  absl::StatusOr<ForwardResult> y = a.forward(*ctx_, random({2, 4}, 1));
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("Linear a: input is"), std::string::npos) << y.status();
  y = a.forward(*ctx_, random({2, 5}, 1, DType::kF32));
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
}

// Two Linears reading one input share a RegionGrad: each adds its input
// gradient into one sum, which finish() returns once both have (here without
// tensor parallelism, so nothing is reduced); anything else is an error.
TEST_F(LayersTest, RegionGradSumsItsContributorsAndChecksTheirCount) {
  auto region = std::make_shared<RegionGrad>(TensorParallel{}, 2);
  const LinearOptions with_region{.dtype = DType::kF64, .region_grad = region};
  Linear a("a", 5, 3, with_region), b("b", 5, 4, with_region);
  Linear a_alone("a", 5, 3, {.dtype = DType::kF64}), b_alone("b", 5, 4, {.dtype = DType::kF64});
  ParameterStore sa = make_store(a, 1), sb = make_store(b, 2);
  ParameterStore sa_alone = make_store(a_alone, 1), sb_alone = make_store(b_alone, 2);
  const Tensor x = random({2, 3, 5}, 3), dya = random({2, 3, 3}, 4), dyb = random({2, 3, 4}, 5);
  auto fa = *a.forward(*ctx_, x), fb = *b.forward(*ctx_, x);
  auto fa_alone = *a_alone.forward(*ctx_, x), fb_alone = *b_alone.forward(*ctx_, x);
  // One contributor is not the whole sum.
  ASSERT_TRUE(a.backward(*ctx_, *fa.saved, dya).ok());
  EXPECT_EQ(region->finish(*ctx_).status().code(), absl::StatusCode::kInternal);
  ASSERT_TRUE(a.backward(*ctx_, *fa.saved, dya).ok());
  ASSERT_TRUE(b.backward(*ctx_, *fb.saved, dyb).ok());
  EXPECT_EQ(a.backward(*ctx_, *fa.saved, dya).status().code(), absl::StatusCode::kInternal);
  region->reset();
  ASSERT_TRUE(a.backward(*ctx_, *fa.saved, dya).ok());
  ASSERT_TRUE(b.backward(*ctx_, *fb.saved, dyb).ok());
  absl::StatusOr<Tensor> dx = region->finish(*ctx_);
  ASSERT_TRUE(dx.ok()) << dx.status();
  const Tensor dxa = *a_alone.backward(*ctx_, *fa_alone.saved, dya);
  const Tensor dxb = *b_alone.backward(*ctx_, *fb_alone.saved, dyb);
  ASSERT_EQ(dx->shape(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_NEAR(dx->data<double>()[i], dxa.data<double>()[i] + dxb.data<double>()[i], 1e-12) << i;
  }
}

TEST_F(LayersTest, LayerNormGradients) {
  LayerNorm ln("ln", 6, {.dtype = DType::kF64});
  expect_gradcheck(ln, random({2, 3, 6}, 3), 1e-5);  // saved stats are float32
}

// forward_add / backward_add against the plain forward with add() before it
// and the plain backward with add() after it: the same sum and normalised
// output bit for bit (one kernel does what the two did, in the same order),
// the input gradient within the one rounding the fused add saves, the same
// parameter gradients, the same hooks; and the same through a checkpointed
// norm (which adds first and recomputes).
TEST_F(LayersTest, NormsFuseTheResidualAdd) {
  for (DType dtype : {DType::kF64, DType::kF32}) {
    for (bool rms : {false, true}) {
      for (bool checkpoint : {false, true}) {
        SCOPED_TRACE(std::string(rms ? "rmsnorm" : "layernorm") +
                     (dtype == DType::kF64 ? " f64" : " f32") + (checkpoint ? " checkpointed" : ""));
        auto make = [&](const std::string& name) -> std::unique_ptr<RowNorm> {
          if (rms) return std::make_unique<RMSNorm>(name, 6, LayerNormOptions{.dtype = dtype});
          return std::make_unique<LayerNorm>(name, 6, LayerNormOptions{.dtype = dtype});
        };
        std::unique_ptr<RowNorm> fused = make("ln"), plain = make("ln");
        fused->set_checkpoint(checkpoint);
        ParameterStore fs = make_store(*fused, 5), ps = make_store(*plain, 5);
        int hooks = 0;
        auto count = [&hooks](Module&, const Tensor&) {
          ++hooks;
          return absl::OkStatus();
        };
        fused->add_forward_pre_hook(count);
        fused->add_forward_hook(count);
        fused->add_backward_pre_hook(count);
        fused->add_backward_hook(count);
        const Tensor x = random({2, 3, 6}, 21, dtype), r = random({2, 3, 6}, 22, dtype);
        const Tensor dy = random({2, 3, 6}, 23, dtype), dr = random({2, 3, 6}, 24, dtype);

        absl::StatusOr<RowNorm::AddResult> f = fused->forward_add(*ctx_, x, r);
        ASSERT_TRUE(f.ok()) << f.status();
        const Tensor sum = *core::ops::add(*ctx_, x, r);
        absl::StatusOr<ForwardResult> p = plain->forward(*ctx_, sum);
        ASSERT_TRUE(p.ok()) << p.status();
        ASSERT_EQ(f->sum.nbytes(), sum.nbytes());
        EXPECT_EQ(std::memcmp(f->sum.raw_data(), sum.raw_data(), sum.nbytes()), 0);
        EXPECT_EQ(std::memcmp(f->normed.output.raw_data(), p->output.raw_data(), sum.nbytes()), 0);

        absl::StatusOr<Tensor> dx = fused->backward_add(*ctx_, *f->normed.saved, dy, dr);
        ASSERT_TRUE(dx.ok()) << dx.status();
        // Checkpointed: the recomputation runs the forward hooks again.
        EXPECT_EQ(hooks, checkpoint ? 6 : 4);
        const Tensor want = *core::ops::add(*ctx_, *plain->backward(*ctx_, *p->saved, dy), dr);
        const double tol = dtype == DType::kF64 ? 1e-14 : 1e-6;  // one rounding of |dx| <~ 10
        for (int64_t i = 0; i < want.numel(); ++i) {
          const double got_i = dtype == DType::kF64 ? dx->data<double>()[i] : dx->data<float>()[i];
          const double want_i = dtype == DType::kF64 ? want.data<double>()[i] : want.data<float>()[i];
          EXPECT_NEAR(got_i, want_i, tol * (1.0 + std::fabs(want_i))) << i;
        }
        for (const char* name : {"ln.weight", "ln.bias"}) {
          if (rms && std::string(name) == "ln.bias") continue;
          const Tensor a = fs.find(name)->grad;
          const Tensor b = ps.find(name)->grad;
          EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << name;
        }
        // The residual gradient is only read.
        const Tensor dr_copy = random({2, 3, 6}, 24, dtype);
        EXPECT_EQ(std::memcmp(dr.raw_data(), dr_copy.raw_data(), dr.nbytes()), 0);
        EXPECT_FALSE(fused->backward_add(*ctx_, *f->normed.saved, dy, Tensor()).ok());
        // Residuals of another shape are refused, naming both shapes (the
        // fused kernel's check, or the unfused add's when checkpointed).
        const Tensor wide = random({2, 3, 7}, 25, dtype);
        absl::StatusOr<RowNorm::AddResult> bad = fused->forward_add(*ctx_, x, wide);
        ASSERT_FALSE(bad.ok());
        EXPECT_TRUE(absl::StrContains(bad.status().message(), "[2, 3, 7]") &&
                    absl::StrContains(bad.status().message(), "[2, 3, 6]"))
            << bad.status();
        absl::StatusOr<Tensor> bad_dx = fused->backward_add(*ctx_, *f->normed.saved, dy, wide);
        ASSERT_FALSE(bad_dx.ok());
        EXPECT_TRUE(absl::StrContains(bad_dx.status().message(), "[2, 3, 7]") &&
                    absl::StrContains(bad_dx.status().message(), "[2, 3, 6]"))
            << bad_dx.status();
      }
    }
  }
}

// Linear::forward_add and Mlp::forward_add: the residual added by the last
// GEMM as it writes equals forward() then add(), up to one rounding; the
// checkpointed modules take that path itself. The backward is backward()'s.
TEST_F(LayersTest, LinearAndMlpAddTheResidualInTheirGemm) {
  for (DType dtype : {DType::kF64, DType::kF32}) {
    for (bool checkpoint : {false, true}) {
      SCOPED_TRACE(std::string(dtype == DType::kF64 ? "f64" : "f32") +
                   (checkpoint ? " checkpointed" : ""));
      Linear fc("fc", 6, 8, {.dtype = dtype});
      Mlp mlp("mlp", 8, dtype);
      fc.set_checkpoint(checkpoint);
      mlp.set_checkpoint(checkpoint);
      ParameterStore fs = make_store(fc, 3), ms = make_store(mlp, 4);
      const Tensor x = random({2, 3, 6}, 31, dtype), h = random({2, 3, 8}, 32, dtype);
      const Tensor r = random({2, 3, 8}, 33, dtype);
      const double tol = dtype == DType::kF64 ? 1e-13 : 1e-5;
      auto expect_sum = [&](Module& m, const ForwardResult& fused, const Tensor& in) {
        const Tensor want = *core::ops::add(*ctx_, m.forward(*ctx_, in)->output, r);
        ASSERT_EQ(fused.output.shape(), want.shape());
        for (int64_t i = 0; i < want.numel(); ++i) {
          const double got_i =
              dtype == DType::kF64 ? fused.output.data<double>()[i] : fused.output.data<float>()[i];
          const double want_i = dtype == DType::kF64 ? want.data<double>()[i] : want.data<float>()[i];
          EXPECT_NEAR(got_i, want_i, tol * (1.0 + std::fabs(want_i))) << m.description() << " " << i;
        }
      };
      absl::StatusOr<ForwardResult> f = fc.forward_add(*ctx_, x, r);
      ASSERT_TRUE(f.ok()) << f.status();
      expect_sum(fc, *f, x);
      absl::StatusOr<ForwardResult> m = mlp.forward_add(*ctx_, h, r);
      ASSERT_TRUE(m.ok()) << m.status();
      expect_sum(mlp, *m, h);
      // The backward of a forward_add context is the plain one's.
      const Tensor dy = random({2, 3, 8}, 34, dtype);
      absl::StatusOr<Tensor> dh = mlp.backward(*ctx_, *m->saved, dy);
      ASSERT_TRUE(dh.ok()) << dh.status();
      EXPECT_EQ(dh->shape(), h.shape());
      // A residual of another shape is refused, naming it.
      const Tensor wrong = random({2, 3, 6}, 35, dtype);
      absl::StatusOr<ForwardResult> bad = fc.forward_add(*ctx_, x, wrong);
      ASSERT_FALSE(bad.ok());
      EXPECT_TRUE(absl::StrContains(bad.status().message(), "[2, 3, 6]")) << bad.status();
    }
  }
}

TEST_F(LayersTest, GeluGradients) {
  Gelu g("g");
  ParameterTable table;
  ASSERT_TRUE(g.declare(table).ok());
  EXPECT_EQ(table.size(), 0u);
  expect_gradcheck(g, random({3, 5}, 4));
}

TEST_F(LayersTest, EmbeddingForwardAndGradients) {
  Embedding emb("transformer", 7, 5, 3, DType::kF64);
  ParameterStore store = make_store(emb);
  Tensor tokens = *Tensor::empty({2, 4}, DType::kI32, core::Stream::cpu());
  const int32_t ids[8] = {1, 6, 1, 0, 3, 3, 2, 5};
  std::copy(ids, ids + 8, tokens.data<int32_t>());
  absl::StatusOr<ForwardResult> y = emb.forward(*ctx_, tokens);
  ASSERT_TRUE(y.ok()) << y.status();
  const double* wte = store.find("transformer.wte.weight")->value.data<double>();
  const double* wpe = store.find("transformer.wpe.weight")->value.data<double>();
  // out[1, 2, 1] = wte[2, 1] + wpe[2, 1]
  EXPECT_DOUBLE_EQ(y->output.data<double>()[(4 + 2) * 3 + 1], wte[2 * 3 + 1] + wpe[2 * 3 + 1]);
  absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, emb, store, tokens, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checked, 7 * 3 + 5 * 3);
  EXPECT_LT(r->max_error, 1e-7) << r->worst;

  tokens.data<int32_t>()[3] = 7;  // out of range
  EXPECT_EQ(emb.forward(*ctx_, tokens).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LayersTest, AttentionGradients) {
  CausalSelfAttention attn("attn", 6, 2, DType::kF64);
  ParameterTable table;
  ASSERT_TRUE(attn.declare(table).ok());
  ASSERT_NE(table.find("attn.c_attn.weight"), nullptr);
  EXPECT_EQ(table.find("attn.c_attn.weight")->shape, core::Shape({6, 18}));
  EXPECT_EQ(table.find("attn.c_proj.bias")->shape, core::Shape({6}));
  expect_gradcheck(attn, random({2, 4, 6}, 5));
}

TEST_F(LayersTest, AttentionIsCausal) {
  // Changing the last position's input leaves earlier outputs unchanged.
  CausalSelfAttention attn("attn", 4, 2, DType::kF64);
  make_store(attn);
  Tensor x = random({1, 3, 4}, 6);
  std::vector<double> before(12);
  {
    ForwardResult y = *attn.forward(*ctx_, x);
    std::copy(y.output.data<double>(), y.output.data<double>() + 12, before.begin());
  }
  x.data<double>()[2 * 4 + 1] += 1.0;
  ForwardResult y = *attn.forward(*ctx_, x);
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(y.output.data<double>()[i], before[i]) << i;
  EXPECT_NE(y.output.data<double>()[9], before[9]);
}

TEST_F(LayersTest, MlpGradients) {
  // Width 4C = 8: GELU in c_fc's GEMM and its derivative in c_proj's.
  Mlp fused("mlp", 2, DType::kF64);
  expect_gradcheck(fused, random({2, 2, 2}, 6));
  // 4C = 12 is no multiple of 8: GELU's own kernels, forward and backward.
  Mlp apart("mlp", 3, DType::kF64);
  expect_gradcheck(apart, random({2, 2, 3}, 7));
}

// A Linear with a GELU activation, alone (its backward applies GELU's
// derivative) and fused into the next Linear's backward, against Linear,
// Gelu, Linear run apart on the same parameters.
TEST_F(LayersTest, GeluActivationFusedAndAlone) {
  const LinearOptions gelu{.dtype = DType::kF64, .activation = Activation::kGelu};
  Sequential apart("m");
  apart.append(std::make_unique<Linear>("m.fc", 4, 16, LinearOptions{.dtype = DType::kF64}));
  apart.append(std::make_unique<Gelu>("m.act"));
  apart.append(std::make_unique<Linear>("m.proj", 16, 4, LinearOptions{.dtype = DType::kF64}));
  Sequential with_act("m");
  Linear* fc = static_cast<Linear*>(with_act.append(std::make_unique<Linear>("m.fc", 4, 16, gelu)));
  Linear* proj = static_cast<Linear*>(
      with_act.append(std::make_unique<Linear>("m.proj", 16, 4, LinearOptions{.dtype = DType::kF64})));
  ParameterStore s_apart = make_store(apart, 3), s_act = make_store(with_act, 3);
  const Tensor x = random({3, 4}, 11), dy = random({3, 4}, 12);

  ForwardResult ra = *apart.forward(*ctx_, x);
  const Tensor dx_apart = *apart.backward(*ctx_, *ra.saved, dy);
  for (int fused = 0; fused < 2; ++fused) {
    SCOPED_TRACE(fused ? "fused" : "alone");
    ASSERT_TRUE(s_act.zero_grad(core::Stream::cpu()).ok());
    ForwardResult h = *fc->forward(*ctx_, x);
    ForwardResult y = *proj->forward(*ctx_, h.output);
    if (fused) {
      ASSERT_TRUE(proj->fuse_input_gelu(*y.saved, *h.saved));
      EXPECT_FALSE(proj->fuse_input_gelu(*y.saved, *h.saved));  // once
    }
    // A producer without the activation has no pre-activation to fuse.
    EXPECT_FALSE(proj->fuse_input_gelu(*h.saved, *y.saved));
    for (int64_t i = 0; i < y.output.numel(); ++i) {
      EXPECT_NEAR(y.output.data<double>()[i], ra.output.data<double>()[i], 1e-12) << i;
    }
    const Tensor dh = *proj->backward(*ctx_, *y.saved, dy);
    const Tensor dx = *fc->backward(*ctx_, *h.saved, dh);
    for (int64_t i = 0; i < dx.numel(); ++i) {
      EXPECT_NEAR(dx.data<double>()[i], dx_apart.data<double>()[i], 1e-12) << i;
    }
    for (const char* name : {"m.fc.weight", "m.fc.bias", "m.proj.weight", "m.proj.bias"}) {
      const Tensor ga = s_apart.find(name)->grad, gb = s_act.find(name)->grad;
      for (int64_t i = 0; i < ga.numel(); ++i) {
        EXPECT_NEAR(gb.data<double>()[i], ga.data<double>()[i], 1e-12) << name << " " << i;
      }
    }
  }
  // The activation needs a bias and a layer that is not row-parallel.
  Linear no_bias("nb", 4, 8, {.bias = false, .dtype = DType::kF64, .activation = Activation::kGelu});
  ParameterTable table;
  const absl::Status st = no_bias.declare(table);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("a GELU activation needs the bias"), std::string::npos) << st;
}

TEST_F(LayersTest, BlockGradients) {
  TransformerBlock block("transformer.h.0", 4, 2, DType::kF64);
  ParameterTable table;
  ASSERT_TRUE(block.declare(table).ok());
  std::vector<std::string> names;
  for (const ParameterEntry& e : table.entries()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "transformer.h.0.ln_1.weight", "transformer.h.0.ln_1.bias",
                       "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias",
                       "transformer.h.0.attn.c_proj.weight", "transformer.h.0.attn.c_proj.bias",
                       "transformer.h.0.ln_2.weight", "transformer.h.0.ln_2.bias",
                       "transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_fc.bias",
                       "transformer.h.0.mlp.c_proj.weight", "transformer.h.0.mlp.c_proj.bias"}));
  expect_gradcheck(block, random({2, 3, 4}, 8), 1e-5);
}

// The usage example of nn/module/module.h.
TEST_F(LayersTest, SequentialOfLayers) {
  Sequential net("net");
  net.append(std::make_unique<Linear>("net.0", 4, 8, LinearOptions{.dtype = DType::kF64}));
  net.append(std::make_unique<Gelu>("net.1"));
  net.append(std::make_unique<Linear>("net.2", 8, 3, LinearOptions{.dtype = DType::kF64}));
  expect_gradcheck(net, random({5, 4}, 10));
}

TEST_F(LayersTest, CrossEntropyMatchesFiniteDifferences) {
  const int64_t n = 3, V = 6, v_real = 5;
  Tensor logits = random({n, V}, 9);
  Tensor targets = *Tensor::empty({n}, DType::kI32, core::Stream::cpu());
  targets.data<int32_t>()[0] = 4;
  targets.data<int32_t>()[1] = -100;  // ignored
  targets.data<int32_t>()[2] = 0;
  absl::StatusOr<CrossEntropyResult> ce = cross_entropy(*ctx_, logits, targets, v_real, {});
  ASSERT_TRUE(ce.ok()) << ce.status();
  // The mean over the two counted rows, in double.
  auto loss = [&]() {
    double total = 0;
    for (int64_t i : {0, 2}) {
      const double* row = logits.data<double>() + i * V;
      double s = 0;
      for (int j = 0; j < v_real; ++j) s += std::exp(row[j]);
      total += std::log(s) - row[targets.data<int32_t>()[i]];
    }
    return total / 2;
  };
  EXPECT_NEAR(ce->loss, loss(), 1e-6);
  for (int64_t i = 0; i < n * V; ++i) {
    double& v = logits.data<double>()[i];
    const double saved = v;
    v = saved + 1e-6;
    const double plus = loss();
    v = saved - 1e-6;
    const double minus = loss();
    v = saved;
    EXPECT_NEAR(ce->dlogits.data<double>()[i], (plus - minus) / 2e-6, 1e-8) << i;
  }
  EXPECT_EQ(ce->dlogits.data<double>()[5], 0.0);  // padding column
  targets.data<int32_t>()[0] = 5;                 // a padding class
  EXPECT_EQ(cross_entropy(*ctx_, logits, targets, v_real, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colossal::nn
