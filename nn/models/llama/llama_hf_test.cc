// Llama in Hugging Face's formats on the CPU: config.json both ways (and a
// real checkpoint's config.json equal to our preset), clear errors naming the
// key, and weights saved and loaded under Hugging Face's names, in the same
// dtype and converted from bfloat16.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"
#include "kernels/common/half.h"
#include "nn/models/causal_lm/hugging_face.h"
#include "nn/models/llama/config_json.h"
#include "nn/models/llama/llama.h"
#include "nn/train/checkpoint.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Stream;

// meta-llama/Llama-3.2-1B's config.json as published.
constexpr char kLlama32_1B[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

// The same checkpoint as transformers 5 writes it: theta and scaling in
// "rope_parameters", the weights' dtype as "dtype".
constexpr char kLlama32_1B_v5[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_parameters": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_type": "llama3",
                      "rope_theta": 500000.0},
  "tie_word_embeddings": true, "dtype": "bfloat16", "transformers_version": "5.17.0",
  "use_cache": true, "vocab_size": 128256})";

// Qwen/Qwen2.5-0.5B's config.json as published.
constexpr char kQwen25_05B[] = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

// mistralai/Mixtral-8x7B-v0.1's config.json.
constexpr char kMixtral8x7B[] = R"({
  "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
  "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0", "use_cache": true, "vocab_size": 32000})";

void expect_same(const LlamaConfig& a, const LlamaConfig& b) {
  EXPECT_EQ(a.num_local_experts, b.num_local_experts);
  EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.kv_heads(), b.kv_heads());
  EXPECT_EQ(a.head_size(), b.head_size());
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.mlp_bias, b.mlp_bias);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_id, b.eos_token_id);
  ASSERT_EQ(a.rope_scaling.has_value(), b.rope_scaling.has_value());
  if (a.rope_scaling) {
    EXPECT_EQ(a.rope_scaling->factor, b.rope_scaling->factor);
    EXPECT_EQ(a.rope_scaling->low_freq_factor, b.rope_scaling->low_freq_factor);
    EXPECT_EQ(a.rope_scaling->high_freq_factor, b.rope_scaling->high_freq_factor);
    EXPECT_EQ(a.rope_scaling->original_max_position_embeddings,
              b.rope_scaling->original_max_position_embeddings);
  }
}

TEST(LlamaHuggingFace, PublishedConfigEqualsThePresetAndRoundTrips) {
  absl::StatusOr<LlamaConfig> read = LlamaConfigFromHuggingFaceJson(kLlama32_1B, "config.json");
  ASSERT_TRUE(read.ok()) << read.status();
  expect_same(*read, *LlamaConfig::preset("llama3.2-1b"));
  absl::StatusOr<LlamaConfig> v5 = LlamaConfigFromHuggingFaceJson(kLlama32_1B_v5, "config.json");
  ASSERT_TRUE(v5.ok()) << v5.status();
  expect_same(*v5, *LlamaConfig::preset("llama3.2-1b"));
  absl::StatusOr<LlamaConfig> mixtral = LlamaConfigFromHuggingFaceJson(kMixtral8x7B, "config.json");
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  expect_same(*mixtral, *LlamaConfig::preset("mixtral-8x7b"));
  for (const char* name :
       {"llama3.2-1b", "tinyllama-1.1b", "llama2-70b", "qwen2.5-0.5b", "qwen2.5-7b", "mixtral-8x7b"}) {
    const LlamaConfig c = *LlamaConfig::preset(name);
    absl::StatusOr<LlamaConfig> back =
        LlamaConfigFromHuggingFaceJson(LlamaConfigToHuggingFaceJson(c, DType::kBF16), "x");
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    expect_same(*back, c);
  }
}

TEST(LlamaHuggingFace, BadConfigsNameFileAndKey) {
  struct Case { const char* json; const char* key; };
  for (const Case& c : {
           Case{R"({"model_type": "gpt2"})", "model_type"},
           Case{R"({"model_type": "llama", "hidden_size": "big"})", "hidden_size"},
           Case{R"({"model_type": "llama", "hidden_act": "gelu"})", "hidden_act"},
           Case{R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4}})",
                "rope_scaling"},
           Case{R"({"model_type": "llama", "rope_parameters": {"rope_type": "linear", "factor": 2}})",
                "rope_parameters"},
           Case{R"({"model_type": "llama", "rope_parameters": {"rope_theta": "big"}})", "rope_theta"},
           Case{R"({"model_type": "mistral", "sliding_window": 0})", "sliding_window"},
           Case{R"({"model_type": "mistral", "sliding_window": "wide"})", "sliding_window"},
           Case{R"({"model_type": "llama", "sliding_window": 4096})", "sliding_window"},
           Case{R"({"model_type": "llama", "num_key_value_heads": 5})", "num_attention_heads"},
           Case{R"({"model_type": "qwen2", "use_sliding_window": true})", "use_sliding_window"},
           Case{R"({"model_type": "qwen2", "use_sliding_window": "no"})", "use_sliding_window"},
           Case{R"({"model_type": "mixtral", "output_router_logits": true})", "output_router_logits"},
           Case{R"({"model_type": "mixtral", "router_jitter_noise": 0.01})", "router_jitter_noise"},
           Case{R"({"model_type": "mixtral", "num_experts_per_tok": 3, "num_local_experts": 2})",
                "num_experts_per_tok"},
           Case{R"({"model_type": "mixtral", "num_local_experts": "eight"})", "num_local_experts"},
           Case{R"([1, 2])", "JSON object"},
       }) {
    absl::StatusOr<LlamaConfig> r = LlamaConfigFromHuggingFaceJson(c.json, "dir/config.json");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "dir/config.json")) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), c.key)) << r.status();
  }
}

// A Qwen2 is a Llama with q/k/v biases: its window is unused without
// use_sliding_window, attention_bias (which transformers' Qwen2 ignores)
// is not read, and it is written back as Qwen2ForCausalLM.
TEST(LlamaHuggingFace, Qwen2ReadsAsALlamaWithQueryKeyValueBiases) {
  absl::StatusOr<LlamaConfig> c = LlamaConfigFromHuggingFaceJson(kQwen25_05B, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  expect_same(*c, *LlamaConfig::preset("qwen2.5-0.5b"));
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->context(), 32768);
  const std::string written = LlamaConfigToHuggingFaceJson(*c, DType::kBF16);
  for (const char* text : {R"("model_type": "qwen2")", R"("Qwen2ForCausalLM")", R"("use_sliding_window": false)"}) {
    EXPECT_TRUE(absl::StrContains(written, text)) << text << " in " << written;
  }
  EXPECT_FALSE(absl::StrContains(written, "attention_bias")) << written;
  absl::StatusOr<LlamaConfig> odd = LlamaConfigFromHuggingFaceJson(
      R"({"model_type": "qwen2", "attention_bias": true, "mlp_bias": true})", "x");
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_FALSE(odd->attention_bias);
  EXPECT_FALSE(odd->mlp_bias);
  EXPECT_TRUE(odd->qkv_bias);
}

// Mistral-7B-v0.1's config.json (transformers' Hub copy).
constexpr char kMistral7B[] = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000
})";

// A Mistral with a sliding window loads: full causal attention is the same up
// to the window, so the model's context is the window; its config.json is
// written back as Mistral's (transformers then applies the window past it).
// Without a window (null) it is a Llama.
TEST(LlamaHuggingFace, MistralsSlidingWindowIsTheContext) {
  absl::StatusOr<LlamaConfig> c = LlamaConfigFromHuggingFaceJson(kMistral7B, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->max_position_embeddings, 32768);
  EXPECT_EQ(c->context(), 4096);
  const std::string written = LlamaConfigToHuggingFaceJson(*c, DType::kBF16);
  EXPECT_TRUE(absl::StrContains(written, R"("model_type": "mistral")")) << written;
  EXPECT_TRUE(absl::StrContains(written, R"("sliding_window": 4096)")) << written;
  absl::StatusOr<LlamaConfig> back = LlamaConfigFromHuggingFaceJson(written, "x");
  ASSERT_TRUE(back.ok()) << back.status();
  expect_same(*back, *c);
  absl::StatusOr<LlamaConfig> unwindowed = LlamaConfigFromHuggingFaceJson(
      R"({"model_type": "mistral", "sliding_window": null, "max_position_embeddings": 32768})", "x");
  ASSERT_TRUE(unwindowed.ok()) << unwindowed.status();
  EXPECT_EQ(unwindowed->context(), 32768);
  EXPECT_FALSE(absl::StrContains(LlamaConfigToHuggingFaceJson(*unwindowed, DType::kBF16), "mistral"));

  // A tiny windowed model: the window is its max_seq_len, and a longer input
  // is refused naming the window.
  LlamaConfig small;
  small.vocab_size = 50, small.padded_vocab_multiple = 16, small.hidden_size = 16;
  small.intermediate_size = 24, small.num_hidden_layers = 1, small.num_attention_heads = 2;
  small.max_position_embeddings = 32, small.sliding_window = 8;
  auto model = *Llama::create(small, DType::kF32, Stream::cpu());
  ASSERT_TRUE(model->init(3).ok());
  EXPECT_EQ(model->max_seq_len(), 8);
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  for (int64_t t : {8, 9}) {
    core::Tensor tokens = *core::Tensor::empty({1, t}, DType::kI32, Stream::cpu());
    for (int64_t i = 0; i < t; ++i) tokens.data<int32_t>()[i] = static_cast<int32_t>(i % 50);
    absl::StatusOr<ForwardResult> out = model->forward(*ctx, tokens);
    if (t == 8) {
      EXPECT_TRUE(out.ok()) << out.status();
    } else {
      ASSERT_FALSE(out.ok());
      EXPECT_TRUE(absl::StrContains(out.status().message(), "sliding_window")) << out.status();
    }
  }
  small.sliding_window = -1;
  EXPECT_TRUE(absl::StrContains(small.validate().message(), "sliding_window"));
}

LlamaConfig tiny(bool tied) {
  LlamaConfig c;
  c.vocab_size = 50, c.padded_vocab_multiple = 16, c.hidden_size = 16, c.intermediate_size = 24;
  c.num_hidden_layers = 2, c.num_attention_heads = 4, c.num_key_value_heads = 2;
  c.max_position_embeddings = 32, c.tie_word_embeddings = tied;
  return c;
}

std::string temp_dir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t != nullptr ? t : "/tmp") + "/" + name;
}

// Saved under Hugging Face's names (padding rows left out), loaded back
// exactly; a bfloat16 save loads into float32 as the rounded values.
TEST(LlamaHuggingFace, WeightsRoundTripInTheSameAndAnotherDtype) {
  for (bool tied : {false, true}) {
    auto model = *Llama::create(tiny(tied), DType::kF32, Stream::cpu());
    ASSERT_TRUE(model->init(11).ok());
    CheckpointToSave save;
    save.step = 1;
    save.architecture = model.get();
    save.model = &model->store();
    absl::StatusOr<std::string> dir = SaveCheckpoint(temp_dir(tied ? "tied" : "untied"), save);
    ASSERT_TRUE(dir.ok()) << dir.status();
    auto loaded = *Llama::create(tiny(tied), DType::kF32, Stream::cpu());
    ASSERT_TRUE(loaded->init(99).ok());
    ASSERT_TRUE(LoadHuggingFaceModel(*dir, *loaded, loaded->store()).ok());
    const core::Tensor a = model->store().flat_values(DType::kF32);
    const core::Tensor b = loaded->store().flat_values(DType::kF32);
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << i;

    auto half = *Llama::create(tiny(tied), DType::kBF16, Stream::cpu());
    ASSERT_TRUE(half->init(5).ok());
    save.architecture = half.get();
    save.model = &half->store();
    absl::StatusOr<std::string> half_dir = SaveCheckpoint(temp_dir(tied ? "tied16" : "untied16"), save);
    ASSERT_TRUE(half_dir.ok()) << half_dir.status();
    auto wide = *Llama::declare(tiny(tied), DType::kF32);
    absl::StatusOr<ParameterStore> host = ParameterStore::create(wide->table(), Stream::cpu());
    ASSERT_TRUE(host.ok());
    ASSERT_TRUE(LoadHuggingFaceModelConverting(*half_dir, *wide, *host).ok());
    const core::Tensor h = half->store().flat_values(DType::kBF16);
    const core::Tensor w = host->flat_values(DType::kF32);
    ASSERT_EQ(h.numel(), w.numel());
    for (int64_t i = 0; i < h.numel(); ++i) {
      ASSERT_EQ(kernels::bfloat16_to_float(h.data<kernels::BFloat16>()[i]), w.data<float>()[i]) << i;
    }
  }
}

}  // namespace
}  // namespace colossal::nn
