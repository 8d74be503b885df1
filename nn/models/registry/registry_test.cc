// The family of a config.json: GPT-2's and Llama's own files declare their
// model; other model types and broken files are errors naming the file.
#include "nn/models/registry/registry.h"

#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "io/common/atomic_file.h"
#include "nn/models/gpt2/config_json.h"
#include "nn/models/llama/config_json.h"

namespace colossal::nn {
namespace {

std::string dir_with(const std::string& name, const std::string& config_json) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t != nullptr ? t : "/tmp") + "/" + name;
  ::mkdir(dir.c_str(), 0755);
  EXPECT_TRUE(io::WriteFileAtomically(dir + "/config.json", config_json).ok());
  return dir;
}

TEST(Registry, DeclaresTheFamilyOfTheConfig) {
  GPT2Config g;
  g.n_layer = 2, g.n_head = 2, g.n_embd = 8, g.vocab_size = 11, g.max_seq_len = 4;
  absl::StatusOr<std::unique_ptr<CausalLM>> gpt2 = DeclareHuggingFaceModel(
      dir_with("gpt2", GPT2ConfigToHuggingFaceJson(g, core::DType::kF32)), core::DType::kF32);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_EQ(std::string((*gpt2)->family()), "gpt2");
  EXPECT_EQ((*gpt2)->vocab_size(), 11);

  LlamaConfig l;
  l.vocab_size = 50, l.hidden_size = 16, l.intermediate_size = 24, l.num_hidden_layers = 2;
  l.num_attention_heads = 4, l.num_key_value_heads = 2;
  absl::StatusOr<std::unique_ptr<CausalLM>> llama = DeclareHuggingFaceModel(
      dir_with("llama", LlamaConfigToHuggingFaceJson(l, core::DType::kBF16)), core::DType::kBF16);
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(std::string((*llama)->family()), "llama");
  EXPECT_EQ((*llama)->dtype(), core::DType::kBF16);
  EXPECT_FALSE((*llama)->store().materialized());

  l.num_local_experts = 4;  // a Mixtral: the Llama family with experts
  absl::StatusOr<std::unique_ptr<CausalLM>> mixtral = DeclareHuggingFaceModel(
      dir_with("mixtral", LlamaConfigToHuggingFaceJson(l, core::DType::kBF16)), core::DType::kBF16);
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  EXPECT_EQ(std::string((*mixtral)->family()), "llama");
  EXPECT_TRUE((*mixtral)->store().table().find("model.layers.1.block_sparse_moe.experts.3.w2.weight") != nullptr);
}

TEST(Registry, OtherModelTypesAndBrokenFilesNameTheFile) {
  for (const char* json : {R"({"model_type": "bert"})", R"({"n_layer": 2})", "[1]"}) {
    const std::string dir = dir_with("other", json);
    absl::StatusOr<std::unique_ptr<CausalLM>> m = DeclareHuggingFaceModel(dir, core::DType::kF32);
    ASSERT_FALSE(m.ok()) << json;
    EXPECT_TRUE(absl::StrContains(m.status().message(), dir + "/config.json")) << m.status();
    EXPECT_TRUE(absl::StrContains(m.status().message(), "model_type")) << m.status();
  }
  // A truncated file is reported as one, not as a missing model_type.
  const std::string cut = dir_with("truncated", R"({"model_type": "gpt2", "n_layer": 2, "n_he)");
  absl::StatusOr<std::unique_ptr<CausalLM>> truncated = DeclareHuggingFaceModel(cut, core::DType::kF32);
  ASSERT_FALSE(truncated.ok());
  EXPECT_TRUE(absl::StrContains(truncated.status().message(), cut + "/config.json' is not valid JSON"))
      << truncated.status();
  absl::StatusOr<std::unique_ptr<CausalLM>> bad_llama = DeclareHuggingFaceModel(
      dir_with("bad_llama", R"({"model_type": "llama", "hidden_act": "relu"})"), core::DType::kF32);
  ASSERT_FALSE(bad_llama.ok());
  EXPECT_TRUE(absl::StrContains(bad_llama.status().message(), "hidden_act")) << bad_llama.status();
}

}  // namespace
}  // namespace colossal::nn
