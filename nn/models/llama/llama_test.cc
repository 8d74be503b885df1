#include "nn/models/llama/llama.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nn/models/causal_lm/testing.h"
#include "nn/module/gradcheck.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;

LlamaConfig tiny_config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 11;
  c.padded_vocab_multiple = 8;  // 11 -> 16
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 16;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 100.0;
  c.rope_scaling = kernels::rope::Llama3RopeScaling{8.0, 1.0, 4.0, 8};
  c.tie_word_embeddings = tied;
  return c;
}

// A float64 CPU model of `config`, initialised (seed 7) and then moved off
// the init's values by N(0, 0.3) noise drawn from `seed`, so every parameter
// matters to the checks.
std::unique_ptr<Llama> perturbed_float64_model(const LlamaConfig& config, uint64_t seed) {
  auto model = *Llama::create(config, DType::kF64, Stream::cpu());
  EXPECT_TRUE(model->init(7).ok());
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.3);
  for (const Parameter& p : model->store().parameters()) {
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<double>()[i] += normal(rng);
  }
  return model;
}

class LlamaTest : public ::testing::Test {
 protected:
  void SetUp() override { ctx_ = std::move(*core::Context::create(core::Device::cpu())); }
  std::unique_ptr<core::Context> ctx_;
};

// Hugging Face's published parameter counts, from the table the presets
// declare (no memory), padding rows excluded.
TEST_F(LlamaTest, PresetsMatchPublishedParameterCounts) {
  struct Case { const char* name; int64_t parameters; };
  for (const Case& c : {Case{"tinyllama-1.1b", 1100048384}, Case{"llama3.2-1b", 1235814400},
                        Case{"llama3.2-3b", 3212749824}, Case{"llama2-7b", 6738415616},
                        Case{"llama3-8b", 8030261248}, Case{"llama2-70b", 68976648192},
                        Case{"qwen2.5-0.5b", 494032768}, Case{"qwen2.5-1.5b", 1543714304},
                        Case{"qwen2.5-3b", 3085938688}, Case{"qwen2.5-7b", 7615616512},
                        Case{"mixtral-8x7b", 46702792704}}) {
    absl::StatusOr<LlamaConfig> config = LlamaConfig::preset(c.name);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->parameter_count(), c.parameters) << c.name;
    absl::StatusOr<ParameterTable> table = Llama::parameter_table(*config, DType::kBF16);
    ASSERT_TRUE(table.ok()) << c.name << ": " << table.status();
    const int64_t padding = (config->padded_vocab_size() - config->vocab_size) *
                            config->hidden_size * (config->tie_word_embeddings ? 1 : 2);
    EXPECT_EQ(table->parameter_count() - padding, c.parameters) << c.name;
  }
  absl::StatusOr<LlamaConfig> typo = LlamaConfig::preset("llama3.2-1B");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(std::string(typo.status().message()).find("llama3.2-1b"), std::string::npos);
}

TEST_F(LlamaTest, HuggingFaceNamesAndShapes) {
  auto model = *Llama::declare(tiny_config(/*tied=*/false), DType::kF32);
  const ParameterTable& t = model->table();
  for (const char* name :
       {"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
        "model.layers.1.self_attn.v_proj.weight", "model.layers.1.self_attn.o_proj.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
        "model.norm.weight", "lm_head.weight"}) {
    EXPECT_NE(t.find(name), nullptr) << name;
  }
  EXPECT_EQ(t.find("model.layers.1.self_attn.k_proj.weight")->shape, (core::Shape{4, 8}));
  EXPECT_EQ(t.find("model.layers.1.self_attn.q_proj.weight")->shape, (core::Shape{8, 8}));
  EXPECT_EQ(t.find("model.layers.0.mlp.down_proj.weight")->shape, (core::Shape{8, 12}));
  EXPECT_EQ(t.find("lm_head.weight")->shape, (core::Shape{16, 8}));
  EXPECT_EQ(model->hugging_face_shape(*t.find("lm_head.weight")), (core::Shape{11, 8}));
  auto tied = *Llama::declare(tiny_config(/*tied=*/true), DType::kF32);
  EXPECT_EQ(tied->table().find("lm_head.weight"), nullptr);
  EXPECT_EQ(std::string(tied->family()), "llama");
}

// Qwen2's biases: q/k/v_proj have them, o_proj and the MLP do not.
TEST_F(LlamaTest, Qwen2HasBiasesOnQueryKeyValueOnly) {
  LlamaConfig c = tiny_config(/*tied=*/true);
  c.qkv_bias = true;
  auto model = *Llama::declare(c, DType::kF32);
  const ParameterTable& t = model->table();
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
    const ParameterEntry* bias = t.find(absl::StrCat("model.layers.1.self_attn.", proj, ".bias"));
    ASSERT_NE(bias, nullptr) << proj;
    EXPECT_EQ(bias->shape, (core::Shape{t.find(absl::StrCat("model.layers.1.self_attn.", proj, ".weight"))->shape[0]}));
  }
  EXPECT_EQ(t.find("model.layers.1.self_attn.o_proj.bias"), nullptr);
  EXPECT_EQ(t.find("model.layers.1.mlp.down_proj.bias"), nullptr);
  c.attention_bias = true;  // Llama's flag adds o_proj's too
  EXPECT_NE(Llama::declare(c, DType::kF32).value()->table().find("model.layers.1.self_attn.o_proj.bias"), nullptr);
}

TEST_F(LlamaTest, InitFollowsTransformers) {
  LlamaConfig c = tiny_config(false);
  c.hidden_size = 64, c.num_attention_heads = 4, c.intermediate_size = 128;
  auto model = *Llama::create(c, DType::kF32, Stream::cpu());
  ASSERT_TRUE(model->init(5).ok());
  for (const Parameter& p : model->store().parameters()) {
    const float* v = p.value.data<float>();
    if (p.value.rank() == 1) {
      for (int64_t i = 0; i < p.value.numel(); ++i) ASSERT_EQ(v[i], 1.0f) << p.name;
      continue;
    }
    const bool vocab = p.name == "model.embed_tokens.weight" || p.name == "lm_head.weight";
    const int64_t real = vocab ? c.vocab_size * c.hidden_size : p.value.numel();
    double sq = 0;
    for (int64_t i = 0; i < real; ++i) sq += double{v[i]} * v[i];
    // The sample std of n normal draws is within a few 1/sqrt(2n) of 0.02.
    EXPECT_NEAR(std::sqrt(sq / real), 0.02, 0.02 * 5.0 / std::sqrt(2.0 * real)) << p.name;
    for (int64_t i = real; i < p.value.numel(); ++i) ASSERT_EQ(v[i], 0.0f) << p.name << " padding";
  }
}

TEST_F(LlamaTest, TinyModelGradientsMatchFiniteDifferences) {
  for (bool tied : {false, true}) {
    LlamaConfig config = tiny_config(tied);
    config.qkv_bias = tied;  // the tied model as a Qwen2
    auto model = perturbed_float64_model(config, 3);
    Tensor tokens = tokens_of({1, 10, 3, 3, 0, 7, 2, 9, 4, 4}, 2, 5);
    absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, *model, model->store(), tokens, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->checked, model->table().parameter_count());
    EXPECT_LT(r->max_error, 1e-5) << (tied ? "tied: " : "untied: ") << r->worst;
  }
}

// Mixtral: every block's MLP a sparse mixture of experts under Hugging
// Face's names; the whole model's gradients against finite differences (the
// router's choice is held fixed by the perturbation's size); refused with
// tensor parallelism.
TEST_F(LlamaTest, TinyMixtralNamesAndGradients) {
  LlamaConfig config = tiny_config(/*tied=*/false);
  config.rope_scaling.reset();
  config.num_local_experts = 4;
  config.num_experts_per_tok = 2;
  config.intermediate_size = 6;
  auto model = perturbed_float64_model(config, 5);
  const ParameterTable& t = model->table();
  EXPECT_EQ(t.find("model.layers.1.block_sparse_moe.gate.weight")->shape, (core::Shape{4, 8}));
  EXPECT_EQ(t.find("model.layers.1.block_sparse_moe.experts.3.w1.weight")->shape, (core::Shape{6, 8}));
  EXPECT_EQ(t.find("model.layers.1.block_sparse_moe.experts.3.w2.weight")->shape, (core::Shape{8, 6}));
  EXPECT_EQ(t.find("model.layers.0.mlp.gate_proj.weight"), nullptr);
  const int64_t padding = (config.padded_vocab_size() - config.vocab_size) * config.hidden_size * 2;
  EXPECT_EQ(t.parameter_count() - padding, config.parameter_count());
  EXPECT_NE(model->describe().find("experts=4, top_k=2"), std::string::npos) << model->describe();
  Tensor tokens = tokens_of({1, 10, 3, 3, 0, 7, 2, 9, 4, 4}, 2, 5);
  absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, *model, model->store(), tokens, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checked, t.parameter_count());
  EXPECT_LT(r->max_error, 1e-5) << r->worst;

  config.num_experts_per_tok = 5;
  absl::Status bad = config.validate();
  EXPECT_NE(std::string(bad.message()).find("num_experts_per_tok"), std::string::npos) << bad;
}

// Packed documents (float64, CPU): rows of two documents each give every
// document's logits and its share of the parameters' gradients as the
// document alone in a row of its own does; with activation checkpointing too
// (the recompute reads the model's documents again). A row's positions must
// count up from 0 within each document.
TEST_F(LlamaTest, PackedDocumentsEqualEachDocumentAlone) {
  for (double ratio : {0.0, 1.0}) {
    LlamaConfig config = tiny_config(false);
    config.checkpoint_ratio = ratio;
    auto model = perturbed_float64_model(config, 5);
    std::mt19937_64 rng(6);
    std::normal_distribution<double> normal(0.0, 0.3);
    const int64_t B = 2, T = 8, V = model->padded_vocab_size();
    const std::vector<int32_t> ids = {1, 10, 3, 3, 0, 7, 2, 9, 4, 4, 5, 6, 8, 1, 2, 3};
    // Row 0: documents of 3 and 5 tokens; row 1: 6 and 2.
    const std::vector<std::vector<int64_t>> lengths = {{3, 5}, {6, 2}};
    Tensor positions = tokens_of(std::vector<int32_t>(B * T, 0), B, T);
    for (int64_t b = 0, at = 0; b < B; ++b) {
      for (int64_t n : lengths[b]) {
        for (int64_t t = 0; t < n; ++t) positions.data<int32_t>()[at++] = static_cast<int32_t>(t);
      }
    }
    auto docs = Documents::from_positions(*ctx_, positions);
    ASSERT_TRUE(docs.ok()) << docs.status();
    EXPECT_EQ((*docs)->cu_seqlens_host, (std::vector<int32_t>{0, 3, 8, 14, 16}));
    EXPECT_EQ((*docs)->max_seqlen, 6);
    std::vector<double> dlogits(B * T * V);
    for (double& g : dlogits) g = normal(rng);

    ASSERT_TRUE(model->store().zero_grad(Stream::cpu()).ok());
    ASSERT_TRUE(model->set_documents(*docs).ok());
    auto packed = model->forward(*ctx_, tokens_of(ids, B, T));
    ASSERT_TRUE(packed.ok()) << packed.status();
    Tensor g = *Tensor::empty({B, T, V}, DType::kF64, Stream::cpu());
    std::copy(dlogits.begin(), dlogits.end(), g.data<double>());
    ASSERT_TRUE(model->backward(*ctx_, *packed->saved, g).ok());
    std::vector<std::vector<double>> packed_grads;
    for (const Parameter& p : model->store().parameters()) {
      packed_grads.emplace_back(p.grad.data<double>(), p.grad.data<double>() + p.grad.numel());
    }

    ASSERT_TRUE(model->set_documents(nullptr).ok());
    ASSERT_TRUE(model->store().zero_grad(Stream::cpu()).ok());
    double worst_logit = 0;
    for (int64_t b = 0, start = 0; b < B; ++b, start = b * T) {
      for (int64_t n : lengths[b]) {
        const std::vector<int32_t> doc(ids.begin() + start, ids.begin() + start + n);
        auto alone = model->forward(*ctx_, tokens_of(doc, 1, n));
        ASSERT_TRUE(alone.ok()) << alone.status();
        for (int64_t i = 0; i < n * V; ++i) {
          worst_logit = std::max(worst_logit, std::abs(alone->output.data<double>()[i] -
                                                       packed->output.data<double>()[start * V + i]));
        }
        Tensor gd = *Tensor::empty({1, n, V}, DType::kF64, Stream::cpu());
        std::copy(dlogits.begin() + start * V, dlogits.begin() + (start + n) * V, gd.data<double>());
        ASSERT_TRUE(model->backward(*ctx_, *alone->saved, gd).ok());
        start += n;
      }
    }
    EXPECT_LT(worst_logit, 1e-12) << "checkpoint_ratio " << ratio;
    size_t k = 0;
    for (const Parameter& p : model->store().parameters()) {
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < p.grad.numel(); ++i) {
        worst = std::max(worst, std::abs(p.grad.data<double>()[i] - packed_grads[k][i]));
        scale = std::max(scale, std::abs(packed_grads[k][i]));
      }
      EXPECT_LE(worst, 1e-12 * std::max(scale, 1.0)) << p.name << " checkpoint_ratio " << ratio;
      ++k;
    }
  }
  // Positions that skip are refused, naming the row and position.
  Tensor bad = tokens_of({0, 1, 2, 4}, 1, 4);
  auto docs = Documents::from_positions(*ctx_, bad);
  ASSERT_FALSE(docs.ok());
  EXPECT_NE(docs.status().message().find("row 0 position 3 is 4"), std::string::npos) << docs.status();
  bad = tokens_of({1, 2, 3, 4}, 1, 4);
  EXPECT_FALSE(Documents::from_positions(*ctx_, bad).ok());
}

TEST_F(LlamaTest, ConfigErrorsNameTheField) {
  struct Case { void (*edit)(LlamaConfig&); const char* field; };
  const Case cases[] = {
      {[](LlamaConfig& c) { c.num_key_value_heads = 3; }, "num_attention_heads"},
      {[](LlamaConfig& c) { c.hidden_size = 10; }, "hidden_size"},
      {[](LlamaConfig& c) { c.head_dim = 5; }, "head_dim"},
      {[](LlamaConfig& c) { c.vocab_size = 0; }, "vocab_size"},
      {[](LlamaConfig& c) { c.rms_norm_eps = 0; }, "rms_norm_eps"},
      {[](LlamaConfig& c) { c.checkpoint_ratio = 2; }, "checkpoint_ratio"},
      {[](LlamaConfig& c) { c.rope_scaling->high_freq_factor = 0.5; }, "rope_scaling"},
      {[](LlamaConfig& c) { c.qkv_bias = true, c.mlp_bias = true; }, "qkv_bias"},
      {[](LlamaConfig& c) { c.qkv_bias = true, c.sliding_window = 8; }, "qkv_bias"},
      {[](LlamaConfig& c) { c.num_hidden_layers = int64_t{1} << 30, c.hidden_size = 1 << 16; },
       "num_hidden_layers"},
  };
  for (const Case& k : cases) {
    LlamaConfig c = tiny_config(false);
    k.edit(c);
    absl::StatusOr<std::unique_ptr<Llama>> m = Llama::declare(c, DType::kF32);
    ASSERT_FALSE(m.ok()) << k.field;
    EXPECT_NE(std::string(m.status().message()).find(k.field), std::string::npos) << m.status();
  }
  auto model = *Llama::create(tiny_config(false), DType::kF32, Stream::cpu());
  absl::StatusOr<ForwardResult> long_input = model->forward(*ctx_, tokens_of(std::vector<int32_t>(17, 1), 1, 17));
  ASSERT_FALSE(long_input.ok());
  EXPECT_NE(std::string(long_input.status().message()).find("max_position_embeddings"),
            std::string::npos);
}

TEST_F(LlamaTest, TinyModelOverfitsOneBatch) {
  LlamaConfig c = tiny_config(false);
  c.hidden_size = 32, c.intermediate_size = 64;
  auto model = *Llama::create(c, DType::kF32, Stream::cpu());
  ASSERT_TRUE(model->init(1).ok());
  const std::vector<int32_t> seq = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3};
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
  EXPECT_NEAR(first_loss, std::log(11.0f), 0.1f);  // near-uniform prediction at init
  EXPECT_LT(loss, 0.1f);
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    const Parameter p = *store.find(name);
    for (int64_t i = 11 * 32; i < 16 * 32; ++i) ASSERT_EQ(p.value.data<float>()[i], 0.0f) << name;
  }
}

}  // namespace
}  // namespace colossal::nn
