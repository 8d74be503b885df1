// Llama's layers on the CPU: finite-difference (float64) gradient checks of
// RMSNorm, the SwiGLU MLP, grouped-query attention with rotary embeddings and
// the decoder block; and grouped-query attention equal to multi-head attention
// with each key/value head repeated (Hugging Face's repeat_kv).
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nn/layers/attention_core.h"
#include "nn/layers/llama_attention.h"
#include "nn/layers/llama_block.h"
#include "nn/layers/llama_mlp.h"
#include "nn/layers/rmsnorm.h"
#include "nn/layers/rotary.h"
#include "nn/layers/sparse_moe.h"
#include "nn/module/gradcheck.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

class LlamaLayersTest : public ::testing::Test {
 protected:
  void SetUp() override { ctx_ = std::move(*core::Context::create(core::Device::cpu())); }

  // Parameters N(0, 0.5); norm weights 1 + N(0, 0.5).
  static ParameterStore make_store(Module& m, uint64_t seed = 7) {
    return random_parameters(m, seed, [](const std::string& name) {
      return name.find("layernorm") != std::string::npos ||
             name.find("norm.weight") != std::string::npos;
    });
  }

  static Tensor random(const core::Shape& shape, uint64_t seed) { return random_normal(shape, seed); }

  void expect_gradcheck(Module& m, const Tensor& x, double tol = 1e-6) {
    ParameterStore store = make_store(m);
    absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, m, store, x, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->checked, 0);
    EXPECT_LT(r->max_error, tol) << m.description() << ": " << r->worst;
  }

  static std::shared_ptr<RotaryTable> rope(int64_t head_dim, bool llama3) {
    std::optional<kernels::rope::Llama3RopeScaling> scaling;
    // A small original context so every branch of Llama-3's scaling is taken
    // at this head size.
    if (llama3) scaling = kernels::rope::Llama3RopeScaling{8.0, 1.0, 4.0, 16};
    absl::StatusOr<std::shared_ptr<RotaryTable>> t = RotaryTable::create(head_dim, 100.0, scaling);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }

  std::unique_ptr<core::Context> ctx_;
};

TEST_F(LlamaLayersTest, RMSNormGradients) {
  RMSNorm norm("norm", 6, {.eps = 1e-5f, .dtype = DType::kF64});
  expect_gradcheck(norm, random({2, 3, 6}, 1));
}

TEST_F(LlamaLayersTest, RMSNormForwardByHand) {
  RMSNorm norm("norm", 2, {.eps = 0.0f, .dtype = DType::kF64});
  ParameterTable table;
  ASSERT_TRUE(norm.declare(table).ok());
  ParameterStore store = *ParameterStore::create(table, core::Stream::cpu());
  ASSERT_TRUE(norm.bind(store).ok());
  store.parameters()[0].value.data<double>()[0] = 2.0;
  store.parameters()[0].value.data<double>()[1] = 1.0;
  Tensor x = random({1, 2}, 1);
  x.data<double>()[0] = 3.0;
  x.data<double>()[1] = 4.0;  // rms = sqrt(12.5)
  absl::StatusOr<ForwardResult> y = norm.forward(*ctx_, x);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_NEAR(y->output.data<double>()[0], 2.0 * 3.0 / std::sqrt(12.5), 1e-7);
  EXPECT_NEAR(y->output.data<double>()[1], 4.0 / std::sqrt(12.5), 1e-7);
}

TEST_F(LlamaLayersTest, MlpGradients) {
  for (bool bias : {false, true}) {
    LlamaMlp mlp("mlp", 4, 6, bias, DType::kF64);
    expect_gradcheck(mlp, random({2, 3, 4}, 2));
  }
}

TEST_F(LlamaLayersTest, AttentionGradients) {
  // Biases: none, attention_bias's (q/k/v/o), Qwen2's (q/k/v only).
  struct Case { int64_t heads, kv_heads, head_dim; bool qkv_bias, o_bias, llama3; };
  for (const Case& c : {Case{4, 2, 6, true, true, true}, Case{2, 2, 4, false, false, false},
                        Case{4, 1, 4, false, false, true}, Case{4, 2, 4, true, false, false}}) {
    LlamaAttention attn("attn", {.hidden = 8, .heads = c.heads, .kv_heads = c.kv_heads,
                                 .head_dim = c.head_dim, .qkv_bias = c.qkv_bias, .o_bias = c.o_bias},
                        rope(c.head_dim, c.llama3), DType::kF64);
    SCOPED_TRACE(::testing::Message() << c.heads << "/" << c.kv_heads << " heads of " << c.head_dim);
    expect_gradcheck(attn, random({2, 5, 8}, 3));
  }
}

TEST_F(LlamaLayersTest, BlockGradients) {
  LlamaBlock block("model.layers.0",
                   {.attention = {.hidden = 8, .heads = 4, .kv_heads = 2, .head_dim = 4},
                    .intermediate = 12, .rms_norm_eps = 1e-5f},
                   rope(4, false), DType::kF64);
  expect_gradcheck(block, random({2, 4, 8}, 4));
}

TEST_F(LlamaLayersTest, MixtralBlockGradients) {
  LlamaBlock block("model.layers.0",
                   {.attention = {.hidden = 8, .heads = 4, .kv_heads = 2, .head_dim = 4},
                    .intermediate = 6, .rms_norm_eps = 1e-5f, .num_experts = 4, .experts_per_token = 2},
                   rope(4, false), DType::kF64);
  ParameterTable table;
  ASSERT_TRUE(block.declare(table).ok());
  EXPECT_NE(table.find("model.layers.0.block_sparse_moe.gate.weight"), nullptr);
  EXPECT_NE(table.find("model.layers.0.block_sparse_moe.experts.3.w2.weight"), nullptr);
  EXPECT_EQ(table.find("model.layers.0.mlp.gate_proj.weight"), nullptr);
  expect_gradcheck(block, random({2, 4, 8}, 4));
}

// The sparse MoE layer against its definition evaluated here token by token,
// its gradients against finite differences, and an expert the router never
// picks: it still runs forward and backward (on no rows), so per-module hooks
// fire, and its gradients stay zero.
TEST_F(LlamaLayersTest, SparseMoeMatchesDefinitionAndGradients) {
  const int64_t C = 8, I = 6, E = 4, k = 2, N = 10;
  for (bool normalize : {true, false}) {
    SCOPED_TRACE(normalize ? "normalized top-k" : "softmax weights");
    SparseMoe moe("moe", {.hidden = C, .intermediate = I, .num_experts = E, .top_k = k, .normalize_top_k = normalize},
                  DType::kF64);
    ParameterStore store = make_store(moe);
    const Tensor gate = store.find("moe.gate.weight")->value;  // [E, C]
    for (int64_t c = 0; c < C; ++c) gate.data<double>()[3 * C + c] = -5.0;
    Tensor x = random({2, 5, C}, 4);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = std::fabs(x.data<double>()[i]) + 0.1;
    int forwards = 0, backwards = 0;
    Module* idle = moe.children()[1 + 3];  // the gate, then experts 0..3
    idle->add_forward_hook([&](Module&, const Tensor& y) {
      ++forwards;
      EXPECT_EQ(y.dim(0), 0);
      return absl::OkStatus();
    });
    idle->add_backward_hook([&](Module&, const Tensor&) {
      ++backwards;
      return absl::OkStatus();
    });

    absl::StatusOr<ForwardResult> out = moe.forward(*ctx_, x);
    ASSERT_TRUE(out.ok()) << out.status();
    auto w = [&](const std::string& name) { return store.find(name)->value.data<double>(); };
    for (int64_t t = 0; t < N; ++t) {
      const double* xt = x.data<double>() + t * C;
      std::vector<double> logits(E), p(E);
      double m = -1e300, z = 0;
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t c = 0; c < C; ++c) logits[e] += gate.data<double>()[e * C + c] * xt[c];
        m = std::max(m, logits[e]);
      }
      for (int64_t e = 0; e < E; ++e) z += std::exp(logits[e] - m);
      for (int64_t e = 0; e < E; ++e) p[e] = std::exp(logits[e] - m) / z;
      std::vector<int64_t> order = {0, 1, 2, 3};
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
      const double S = p[order[0]] + p[order[1]];
      ASSERT_NE(order[0], 3);
      ASSERT_NE(order[1], 3);
      std::vector<double> y(C, 0.0);
      for (int64_t i = 0; i < k; ++i) {
        const int64_t e = order[i];
        const std::string pre = "moe.experts." + std::to_string(e) + ".";
        const double *w1 = w(pre + "w1.weight"), *w3 = w(pre + "w3.weight"), *w2 = w(pre + "w2.weight");
        std::vector<double> h(I);
        for (int64_t j = 0; j < I; ++j) {
          double g = 0, u = 0;
          for (int64_t c = 0; c < C; ++c) g += w1[j * C + c] * xt[c], u += w3[j * C + c] * xt[c];
          h[j] = g / (1 + std::exp(-g)) * u;
        }
        const double weight = normalize ? p[e] / S : p[e];
        for (int64_t c = 0; c < C; ++c) {
          double d = 0;
          for (int64_t j = 0; j < I; ++j) d += w2[c * I + j] * h[j];
          y[c] += weight * d;
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        EXPECT_NEAR(out->output.data<double>()[t * C + c], y[c], 1e-13 * (1 + std::fabs(y[c])));
      }
    }

    absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, moe, store, x, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LT(r->max_error, 1e-6) << r->worst;
    EXPECT_GT(forwards, 1);
    EXPECT_GT(backwards, 0);
    for (const char* p : {"w1", "w2", "w3"}) {
      const Tensor g = store.find(std::string("moe.experts.3.") + p + ".weight")->grad;
      for (int64_t i = 0; i < g.numel(); ++i) ASSERT_EQ(g.data<double>()[i], 0.0) << p;
    }
  }
}

// Grouped-query attention on [B, T, (H + 2 KV) D] equals multi-head attention
// on [B, T, 3 H D] whose key/value head h is the grouped head h / (H / KV);
// its dk, dv are the sums of the multi-head gradients over each group.
TEST_F(LlamaLayersTest, GroupedQueryEqualsRepeatedHeads) {
  const int64_t B = 2, T = 7, H = 6, KV = 2, D = 4, r = H / KV;
  const Tensor gqa = random({B, T, (H + 2 * KV) * D}, 11);
  Tensor mha = *Tensor::empty({B, T, 3 * H * D}, DType::kF64, core::Stream::cpu());
  auto at = [&](const Tensor& t, int64_t row_heads, int64_t b, int64_t s, int64_t head, int64_t c) -> double& {
    return t.data<double>()[((b * T + s) * row_heads + head) * D + c];
  };
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < T; ++s) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t c = 0; c < D; ++c) {
          at(mha, 3 * H, b, s, h, c) = at(gqa, H + 2 * KV, b, s, h, c);
          at(mha, 3 * H, b, s, H + h, c) = at(gqa, H + 2 * KV, b, s, H + h / r, c);
          at(mha, 3 * H, b, s, 2 * H + h, c) = at(gqa, H + 2 * KV, b, s, H + KV + h / r, c);
        }
      }
    }
  }
  AttentionCoreSaved saved_gqa, saved_mha;
  absl::StatusOr<Tensor> y_gqa =
      attention_core_forward(*ctx_, gqa, {H, KV, D}, AttentionImpl::kExplicit, saved_gqa);
  absl::StatusOr<Tensor> y_mha =
      attention_core_forward(*ctx_, mha, {H, H, D}, AttentionImpl::kExplicit, saved_mha);
  ASSERT_TRUE(y_gqa.ok() && y_mha.ok()) << y_gqa.status() << y_mha.status();
  for (int64_t i = 0; i < y_gqa->numel(); ++i) {
    ASSERT_NEAR(y_gqa->data<double>()[i], y_mha->data<double>()[i], 1e-12) << i;
  }
  const Tensor dy = random({B, T, H * D}, 12);
  absl::StatusOr<Tensor> d_gqa = attention_core_backward(*ctx_, saved_gqa, dy);
  absl::StatusOr<Tensor> d_mha = attention_core_backward(*ctx_, saved_mha, dy);
  ASSERT_TRUE(d_gqa.ok() && d_mha.ok()) << d_gqa.status() << d_mha.status();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < T; ++s) {
      for (int64_t c = 0; c < D; ++c) {
        for (int64_t h = 0; h < H; ++h) {
          ASSERT_NEAR(at(*d_gqa, H + 2 * KV, b, s, h, c), at(*d_mha, 3 * H, b, s, h, c), 1e-12);
        }
        for (int64_t g = 0; g < KV; ++g) {
          double dk = 0, dv = 0;
          for (int64_t j = 0; j < r; ++j) {
            dk += at(*d_mha, 3 * H, b, s, H + g * r + j, c);
            dv += at(*d_mha, 3 * H, b, s, 2 * H + g * r + j, c);
          }
          ASSERT_NEAR(at(*d_gqa, H + 2 * KV, b, s, H + g, c), dk, 1e-12) << "dk";
          ASSERT_NEAR(at(*d_gqa, H + 2 * KV, b, s, H + KV + g, c), dv, 1e-12) << "dv";
        }
      }
    }
  }
}

TEST_F(LlamaLayersTest, AttentionRejectsHeadsNotAMultiple) {
  AttentionCoreSaved saved;
  const Tensor qkv = random({1, 2, (3 + 4) * 2}, 1);
  absl::StatusOr<Tensor> y = attention_core_forward(*ctx_, qkv, {3, 2, 2}, AttentionImpl::kAuto, saved);
  ASSERT_FALSE(y.ok());
  EXPECT_NE(std::string(y.status().message()).find("multiple"), std::string::npos) << y.status();
}

}  // namespace
}  // namespace colossal::nn
