// Writes a checkpoint of a tiny randomly initialised GPT-2 whose vocabulary is
// the 256 bytes (so a byte-level tiktoken file tokenizes for it): 2 layers,
// 2 heads, n_embd 16, context 8 (shorter than the generated text, so the
// forward window slides). Weights are GPT-2's init scaled up, so the logits
// differ enough for greedy and sampled text to vary. For lua/cli_test.sh:
//
//   write_test_checkpoint OUT_ROOT [--bf16] [--llama]  -> OUT_ROOT/step_000007, OUT_ROOT/latest
#include <cstdio>
#include <memory>
#include <string>

#include "core/context/context.h"
#include "core/ops/elementwise.h"
#include "io/checkpoint/checkpoint.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/models/llama/llama.h"
#include "core/status/status.h"
#include "nn/train/checkpoint.h"

namespace {

using colossal::core::DType;

// The tiny model over the 256 bytes: GPT-2, or with --llama a Llama (2 layers,
// hidden 32, 4 query / 2 key-value heads, context 64).
absl::StatusOr<std::unique_ptr<colossal::nn::CausalLM>> TinyModel(bool llama) {
  if (llama) {
    colossal::nn::LlamaConfig c;
    c.vocab_size = 256, c.padded_vocab_multiple = 64, c.hidden_size = 32;
    c.intermediate_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4;
    c.num_key_value_heads = 2, c.max_position_embeddings = 64, c.rope_theta = 1000.0;
    COLOSSAL_ASSIGN_OR_RETURN(auto model, colossal::nn::Llama::create(c, DType::kF32,
                                                                       colossal::core::Stream::cpu()));
    return std::unique_ptr<colossal::nn::CausalLM>(std::move(model));
  }
  colossal::nn::GPT2Config config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 16;
  config.vocab_size = 256;
  config.max_seq_len = 8;
  config.padded_vocab_multiple = 64;
  COLOSSAL_ASSIGN_OR_RETURN(auto model, colossal::nn::GPT2::create(config, DType::kF32,
                                                                    colossal::core::Stream::cpu()));
  return std::unique_ptr<colossal::nn::CausalLM>(std::move(model));
}

absl::StatusOr<std::string> Write(const std::string& root, bool bf16, bool llama) {
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<colossal::nn::CausalLM> model, TinyModel(llama));
  COLOSSAL_RETURN_IF_ERROR(model->init(1337));
  // Scaled-up weights (norm weights stay 1 for Llama) so the logits differ.
  for (const colossal::nn::Parameter& p : model->store().parameters()) {
    if (llama && p.value.rank() == 1) continue;
    float* v = p.value.data<float>();
    for (int64_t i = 0; i < p.value.numel(); ++i) v[i] *= llama ? 20.0f : 50.0f;
  }
  colossal::nn::CheckpointToSave save;
  save.step = 7;
  save.architecture = model.get();
  save.model = &model->store();
  std::unique_ptr<colossal::nn::CausalLM> narrow;
  if (bf16) {
    COLOSSAL_ASSIGN_OR_RETURN(narrow, model->redeclare(DType::kBF16));
    COLOSSAL_RETURN_IF_ERROR(narrow->store().allocate(colossal::core::Stream::cpu()));
    COLOSSAL_ASSIGN_OR_RETURN(auto ctx, colossal::core::Context::create(colossal::core::Device::cpu()));
    colossal::core::Tensor out = narrow->store().flat_values(DType::kBF16);
    COLOSSAL_RETURN_IF_ERROR(
        colossal::core::ops::cast(*ctx, out, model->store().flat_values(DType::kF32)));
    save.model = &narrow->store();
  }
  return colossal::nn::SaveCheckpoint(root, save);
}

}  // namespace

int main(int argc, char** argv) {
  // --bf16: the weights are saved in bfloat16, as GPU training in bf16 does.
  // --llama: a Llama instead of a GPT-2.
  bool bf16 = false, llama = false;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--bf16") {
      bf16 = true;
    } else if (flag == "--llama") {
      llama = true;
    } else {
      argc = 0;
    }
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_ROOT [--bf16] [--llama]\n", argv[0]);
    return 2;
  }
  absl::StatusOr<std::string> dir = Write(argv[1], bf16, llama);
  if (!dir.ok()) {
    std::fprintf(stderr, "%s\n", dir.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", dir->c_str());
  return 0;
}
