#include "nn/models/gpt2/gpt2.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc/default_allocator.h"
#include "gtest/gtest.h"
#include "nn/layers/cross_entropy.h"
#include "nn/models/causal_lm/testing.h"
#include "nn/module/gradcheck.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;

GPT2Config tiny_config() {
  GPT2Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.vocab_size = 11;
  c.max_seq_len = 4;
  c.padded_vocab_multiple = 8;  // 11 -> 16
  return c;
}

class GPT2Test : public ::testing::Test {
 protected:
  void SetUp() override { ctx_ = std::move(*core::Context::create(core::Device::cpu())); }
  std::unique_ptr<core::Context> ctx_;
};

TEST_F(GPT2Test, PresetsAndParameterCounts) {
  absl::StatusOr<GPT2Config> c = GPT2Config::preset("gpt2");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->padded_vocab_size(), 50304);
  absl::StatusOr<ParameterTable> t = GPT2::parameter_table(*c, DType::kF32);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->parameter_count(), 124475904);  // llm.c's count (padded vocabulary)
  EXPECT_EQ(t->parameter_count() - (50304 - 50257) * 768, 124439808);  // Hugging Face's
  EXPECT_EQ(t->size(), 2u + 12u * 12u + 2u);
  EXPECT_EQ(t->entries()[0].name, "transformer.wte.weight");
  EXPECT_EQ(t->entries()[0].shape, core::Shape({50304, 768}));
  EXPECT_EQ(t->find("transformer.h.11.mlp.c_fc.weight")->shape, core::Shape({768, 3072}));
  EXPECT_EQ(t->entries().back().name, "transformer.ln_f.bias");
  EXPECT_EQ(t->find("lm_head.weight"), nullptr);  // tied
  EXPECT_EQ(GPT2::hugging_face_shape(*c, t->entries()[0]), core::Shape({50257, 768}));
  const ParameterEntry& c_attn = *t->find("transformer.h.3.attn.c_attn.weight");
  EXPECT_EQ(GPT2::hugging_face_shape(*c, c_attn), core::Shape({768, 2304}));  // Conv1D [in, out]

  const std::pair<const char*, int64_t> hf_counts[] = {
      {"gpt2-medium", 354823168}, {"gpt2-large", 774030080}, {"gpt2-xl", 1557611200}};
  for (const auto& [name, hf] : hf_counts) {
    GPT2Config p = *GPT2Config::preset(name);
    ParameterTable table = *GPT2::parameter_table(p, DType::kF32);
    EXPECT_EQ(table.parameter_count() - (50304 - 50257) * p.n_embd, hf) << name;
  }
  absl::StatusOr<GPT2Config> bad = GPT2Config::preset("gpt2-meduim");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("did you mean \"gpt2-medium\""), std::string::npos);

  GPT2Config odd = tiny_config();
  odd.n_head = 3;
  EXPECT_EQ(GPT2::create(odd, DType::kF32, Stream::cpu()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GPT2Test, InitIsReproducibleAndFollowsGpt2) {
  GPT2Config c = tiny_config();
  c.n_layer = 3;
  c.n_embd = 64;
  c.max_seq_len = 32;
  auto a = *GPT2::create(c, DType::kF32, Stream::cpu());
  auto b = *GPT2::create(c, DType::kF32, Stream::cpu());
  ASSERT_TRUE(a->init(42).ok());
  ASSERT_TRUE(b->init(42).ok());
  Tensor fa = a->store().flat_values(DType::kF32), fb = b->store().flat_values(DType::kF32);
  EXPECT_EQ(std::memcmp(fa.raw_data(), fb.raw_data(), fa.nbytes()), 0);
  ASSERT_TRUE(b->init(43).ok());
  EXPECT_NE(std::memcmp(fa.raw_data(), fb.raw_data(), fa.nbytes()), 0);

  auto stddev = [](const Parameter& p) {
    double s = 0;
    for (int64_t i = 0; i < p.value.numel(); ++i) s += double(p.value.data<float>()[i]) * p.value.data<float>()[i];
    return std::sqrt(s / p.value.numel());
  };
  const ParameterStore& store = a->store();
  EXPECT_NEAR(stddev(*store.find("transformer.h.0.mlp.c_fc.weight")), 0.02, 0.002);
  EXPECT_NEAR(stddev(*store.find("transformer.h.1.mlp.c_proj.weight")), 0.02 / std::sqrt(6.0),
              0.001);
  EXPECT_NEAR(stddev(*store.find("transformer.h.2.attn.c_proj.weight")), 0.02 / std::sqrt(6.0),
              0.001);
  for (const Parameter& p : store.parameters()) {
    const float* v = p.value.data<float>();
    if (p.name.ends_with(".bias")) {
      for (int64_t i = 0; i < p.value.numel(); ++i) ASSERT_EQ(v[i], 0.0f) << p.name;
    } else if (p.name.find(".ln_") != std::string::npos) {
      for (int64_t i = 0; i < p.value.numel(); ++i) ASSERT_EQ(v[i], 1.0f) << p.name;
    }
  }
  const Parameter wte = *store.find("transformer.wte.weight");
  for (int64_t i = 11 * 64; i < 16 * 64; ++i) ASSERT_EQ(wte.value.data<float>()[i], 0.0f);
  EXPECT_NE(wte.value.data<float>()[10 * 64], 0.0f);
}

TEST_F(GPT2Test, TinyModelGradientsMatchFiniteDifferences) {
  auto model = *GPT2::create(tiny_config(), DType::kF64, Stream::cpu());
  ASSERT_TRUE(model->init(7).ok());
  // Larger weights than GPT-2's 0.02 so every path carries signal.
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 0.3);
  for (const Parameter& p : model->store().parameters()) {
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<double>()[i] += normal(rng);
  }
  Tensor tokens = tokens_of({1, 10, 3, 3, 0, 7, 2, 9}, 2, 4);
  absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, *model, model->store(), tokens, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checked, model->table().parameter_count());
  EXPECT_LT(r->max_error, 1e-5) << r->worst;
}

// Sizes beyond the limits are refused by validate() (so by create(), before
// any allocation), naming the field and the limit; the largest model that
// fits is accepted by validate().
TEST_F(GPT2Test, ConfigRejectsSizesBeyondTheLimits) {
  GPT2Config c = tiny_config();
  c.n_layer = 100000;
  c.n_embd = 65536;
  c.n_head = 4;
  absl::Status s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("n_layer is 100000"), std::string::npos) << s;
  EXPECT_NE(s.message().find("the limit is 2^48"), std::string::npos) << s;
  EXPECT_FALSE(GPT2::create(c, DType::kF32, Stream::cpu()).ok());
  c.n_layer = 1;
  c.n_embd = int64_t{1} << 23;  // one layer alone: 8e14 parameters
  s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("n_embd is 8388608"), std::string::npos) << s;
  c = tiny_config();
  c.vocab_size = int64_t{1} << 32;
  s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("vocab_size is 4294967296; the limit is 2^31 - 1"), std::string::npos) << s;
  c = tiny_config();
  c.n_layer = 1000;  // 12 * 2^24 * 1000 = 2e11 parameters: valid, never allocated here
  c.n_embd = 4096;
  c.n_head = 32;
  EXPECT_TRUE(c.validate().ok());
}

// Lazy construction: a 1-trillion-parameter GPT-2 costs its module tree and
// table, no parameter memory; running it unmaterialized names the parameter,
// and materializing it on this host is refused with the size.
TEST_F(GPT2Test, ATrillionParametersAreDeclaredWithoutMemory) {
  GPT2Config c;
  c.n_layer = 128;
  c.n_head = 100;
  c.n_embd = 25600;
  const int64_t before = core::cpu_allocator()->stats().allocated_bytes;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<GPT2>> model = GPT2::declare(c, DType::kF32);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(core::cpu_allocator()->stats().allocated_bytes, before);  // no tensor at all
  EXPECT_LT(seconds, 1.0);  // the bar; it takes milliseconds
  const int64_t n = (*model)->table().parameter_count();
  EXPECT_GT(n, int64_t{1000000000000});
  EXPECT_EQ(n, (c.padded_vocab_size() + c.max_seq_len) * c.n_embd +
                   c.n_layer * (12 * c.n_embd * c.n_embd + 13 * c.n_embd) + 2 * c.n_embd);
  EXPECT_FALSE((*model)->store().materialized());
  EXPECT_FALSE((*model)->store().flat_values(DType::kF32).defined());
  absl::StatusOr<ForwardResult> out = (*model)->forward(*ctx_, tokens_of({1, 2}, 1, 2));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(out.status().message().find("\"transformer.wte.weight\" has no memory"),
            std::string::npos)
      << out.status();
  absl::Status s = (*model)->store().allocate(Stream::cpu());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(absl::StrCat("materializing ", n, " parameters (7.33 TiB")),
            std::string::npos)
      << s;
  EXPECT_EQ(core::cpu_allocator()->stats().allocated_bytes, before);
}

// A declared model, materialized and initialised later, equals one created at once.
TEST_F(GPT2Test, DeclaredThenMaterializedEqualsCreated) {
  auto created = *GPT2::create(tiny_config(), DType::kF32, Stream::cpu());
  ASSERT_TRUE(created->init(7).ok());
  auto declared = *GPT2::declare(tiny_config(), DType::kF32);
  ASSERT_TRUE(declared->store().allocate(Stream::cpu()).ok());
  ASSERT_TRUE(declared->init(7).ok());
  const Tensor a = created->store().flat_values(DType::kF32);
  const Tensor b = declared->store().flat_values(DType::kF32);
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
  absl::StatusOr<ForwardResult> x = created->forward(*ctx_, tokens_of({1, 2, 3}, 1, 3));
  absl::StatusOr<ForwardResult> y = declared->forward(*ctx_, tokens_of({1, 2, 3}, 1, 3));
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(std::memcmp(x->output.raw_data(), y->output.raw_data(), x->output.nbytes()), 0);
}

TEST_F(GPT2Test, RejectsBadTokensWithTheModulePath) {
  auto model = *GPT2::create(tiny_config(), DType::kF32, Stream::cpu());
  absl::StatusOr<ForwardResult> out = model->forward(*ctx_, tokens_of({1, 2, 3, 4, 5}, 1, 5));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("GPT2 gpt2: Embedding transformer: tokens are"),
            std::string::npos)
      << out.status();
}

// Saved activations belong to the call: two micro-batches in flight, their
// backwards in either order, accumulate the same gradients as one at a time.
TEST_F(GPT2Test, MicroBatchesInFlightAccumulate) {
  auto model = *GPT2::create(tiny_config(), DType::kF64, Stream::cpu());
  ASSERT_TRUE(model->init(5).ok());
  Tensor a = tokens_of({1, 2, 3, 4, 5, 6, 7, 8}, 2, 4), b = tokens_of({9, 9, 0, 1}, 1, 4);
  auto dlogits = [&](const Tensor& logits, double k) {
    Tensor d = *Tensor::empty(logits.shape(), DType::kF64, Stream::cpu());
    for (int64_t i = 0; i < d.numel(); ++i) d.data<double>()[i] = std::sin(k * (i + 1));
    return d;
  };
  ParameterStore& store = model->store();
  Tensor g = store.flat_grads(DType::kF64);
  // One at a time.
  ASSERT_TRUE(store.zero_grad(Stream::cpu()).ok());
  ForwardResult fa = *model->forward(*ctx_, a);
  ASSERT_TRUE(model->backward(*ctx_, *fa.saved, dlogits(fa.output, 0.3)).ok());
  ForwardResult fb = *model->forward(*ctx_, b);
  ASSERT_TRUE(model->backward(*ctx_, *fb.saved, dlogits(fb.output, 0.7)).ok());
  std::vector<double> sequential(g.data<double>(), g.data<double>() + g.numel());
  // Both forwards first, backwards in reverse order.
  ASSERT_TRUE(store.zero_grad(Stream::cpu()).ok());
  ForwardResult fa2 = *model->forward(*ctx_, a);
  ForwardResult fb2 = *model->forward(*ctx_, b);
  ASSERT_TRUE(model->backward(*ctx_, *fb2.saved, dlogits(fb2.output, 0.7)).ok());
  ASSERT_TRUE(model->backward(*ctx_, *fa2.saved, dlogits(fa2.output, 0.3)).ok());
  for (int64_t i = 0; i < g.numel(); ++i) {
    ASSERT_NEAR(g.data<double>()[i], sequential[i], 1e-12 * (1 + std::abs(sequential[i]))) << i;
  }
}

// The float32 path agrees with the float64 path the gradient check covers.
TEST_F(GPT2Test, Float32MatchesFloat64) {
  auto m32 = *GPT2::create(tiny_config(), DType::kF32, Stream::cpu());
  auto m64 = *GPT2::create(tiny_config(), DType::kF64, Stream::cpu());
  ASSERT_TRUE(m32->init(9).ok());
  Tensor w32 = m32->store().flat_values(DType::kF32), w64 = m64->store().flat_values(DType::kF64);
  ASSERT_EQ(w32.numel(), w64.numel());
  for (int64_t i = 0; i < w32.numel(); ++i) {
    w32.data<float>()[i] *= 10;  // larger weights: a less trivial function
    w64.data<double>()[i] = w32.data<float>()[i];
  }
  Tensor tokens = tokens_of({4, 8, 15, 10, 2, 3, 1, 0}, 2, 4);
  ForwardResult o32 = *m32->forward(*ctx_, tokens), o64 = *m64->forward(*ctx_, tokens);
  double max_diff = 0, max_abs = 0;
  for (int64_t i = 0; i < o64.output.numel(); ++i) {
    max_diff = std::max(max_diff, std::abs(o32.output.data<float>()[i] - o64.output.data<double>()[i]));
    max_abs = std::max(max_abs, std::abs(o64.output.data<double>()[i]));
  }
  EXPECT_GT(max_abs, 0.1);
  EXPECT_LT(max_diff, 1e-5 * (1 + max_abs));
  Tensor d32 = *Tensor::empty(o32.output.shape(), DType::kF32, Stream::cpu());
  Tensor d64 = *Tensor::empty(o64.output.shape(), DType::kF64, Stream::cpu());
  for (int64_t i = 0; i < d64.numel(); ++i) {
    d64.data<double>()[i] = d32.data<float>()[i] = static_cast<float>(std::cos(0.37 * i));
  }
  ASSERT_TRUE(m32->backward(*ctx_, *o32.saved, d32).ok());
  ASSERT_TRUE(m64->backward(*ctx_, *o64.saved, d64).ok());
  Tensor g32 = m32->store().flat_grads(DType::kF32), g64 = m64->store().flat_grads(DType::kF64);
  double gmax = 0, gdiff = 0;
  for (int64_t i = 0; i < g64.numel(); ++i) {
    gmax = std::max(gmax, std::abs(g64.data<double>()[i]));
    gdiff = std::max(gdiff, std::abs(g32.data<float>()[i] - g64.data<double>()[i]));
  }
  EXPECT_GT(gmax, 0.1);
  EXPECT_LT(gdiff, 1e-4 * gmax);
}

// Hooks fire around every block, in forward order and then in reverse.
TEST_F(GPT2Test, BlockHooksFireInOrder) {
  GPT2Config c = tiny_config();
  c.n_layer = 3;
  auto model = *GPT2::create(c, DType::kF32, Stream::cpu());
  ASSERT_TRUE(model->init(2).ok());
  std::vector<std::string> events;
  for (size_t i = 0; i < model->blocks().size(); ++i) {
    Module& block = model->blocks().at(i);
    block.add_forward_pre_hook([&](Module& m, const Tensor&) {
      events.push_back("f " + m.name());
      return absl::OkStatus();
    });
    block.add_backward_hook([&](Module& m, const Tensor&) {
      events.push_back("b " + m.name());
      return absl::OkStatus();
    });
  }
  Tensor tokens = tokens_of({1, 2, 3, 4}, 1, 4);
  ForwardResult out = *model->forward(*ctx_, tokens);
  Tensor d = *Tensor::empty(out.output.shape(), DType::kF32, Stream::cpu());
  ASSERT_TRUE(d.set_zero(Stream::cpu()).ok());
  ASSERT_TRUE(model->backward(*ctx_, *out.saved, d).ok());
  EXPECT_EQ(events, (std::vector<std::string>{"f transformer.h.0", "f transformer.h.1",
                                              "f transformer.h.2", "b transformer.h.2",
                                              "b transformer.h.1", "b transformer.h.0"}));
}

// A tiny GPT-2 memorises one batch with Adam steps written here.
TEST_F(GPT2Test, TinyModelOverfitsOneBatch) {
  GPT2Config c = tiny_config();
  c.n_embd = 16;
  c.max_seq_len = 8;
  auto model = *GPT2::create(c, DType::kF32, Stream::cpu());
  ASSERT_TRUE(model->init(1).ok());
  std::vector<int32_t> seq = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3};
  std::vector<int32_t> in, target;
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 8; ++t) {
      in.push_back(seq[b * 9 + t]);
      target.push_back(seq[b * 9 + t + 1]);
    }
  }
  Tensor tokens = tokens_of(in, 2, 8), targets = tokens_of(target, 2, 8);
  absl::StatusOr<OverfitResult> r = overfit_one_batch(*ctx_, *model, tokens, targets);
  ASSERT_TRUE(r.ok()) << r.status();
  const float first_loss = r->first_loss, loss = r->last_loss;
  ParameterStore& store = model->store();
  EXPECT_NEAR(first_loss, std::log(11.0f), 0.1f);  // uniform prediction at init
  EXPECT_LT(loss, 0.1f);
  // Padding rows of wte receive no gradient from the loss and stay zero.
  const Parameter wte = *store.find("transformer.wte.weight");
  for (int64_t i = 11 * 16; i < 16 * 16; ++i) ASSERT_EQ(wte.value.data<float>()[i], 0.0f);
}

}  // namespace
}  // namespace colossal::nn
