// Writes a checkpoint of a tiny randomly initialised GPT-2 whose vocabulary is
// the 256 bytes (so a byte-level tiktoken file tokenizes for it): 2 layers,
// 2 heads, n_embd 16, context 8 (shorter than the generated text, so the
// forward window slides). Weights are GPT-2's init scaled up, so the logits
// differ enough for greedy and sampled text to vary. For lua/cli_test.sh:
//
//   write_test_checkpoint OUT_ROOT   -> OUT_ROOT/step_000007, OUT_ROOT/latest
#include <cstdio>
#include <memory>
#include <string>

#include "core/context/context.h"
#include "core/ops/elementwise.h"
#include "io/checkpoint/checkpoint.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/models/gpt2/hugging_face.h"
#include "nn/train/checkpoint.h"

int main(int argc, char** argv) {
  // --bf16: the weights are saved in bfloat16, as GPU training in bf16 does.
  const bool bf16 = argc == 3 && std::string(argv[2]) == "--bf16";
  if (argc != 2 && !bf16) {
    std::fprintf(stderr, "usage: %s OUT_ROOT [--bf16]\n", argv[0]);
    return 2;
  }
  colossal::nn::GPT2Config config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 16;
  config.vocab_size = 256;
  config.max_seq_len = 8;
  config.padded_vocab_multiple = 64;
  absl::StatusOr<std::unique_ptr<colossal::nn::GPT2>> model =
      colossal::nn::GPT2::create(config, colossal::core::DType::kF32, colossal::core::Stream::cpu());
  absl::Status s = model.ok() ? (*model)->init(1337) : model.status();
  if (s.ok()) {
    for (const colossal::nn::Parameter& p : (*model)->store().parameters()) {
      float* v = p.value.data<float>();
      for (int64_t i = 0; i < p.value.numel(); ++i) v[i] *= 50.0f;
    }
    colossal::nn::CheckpointToSave save;
    save.step = 7;
    save.architecture = model->get();
    save.model = &(*model)->store();
    absl::StatusOr<colossal::nn::ParameterStore> narrow;
    if (bf16) {
      auto table = colossal::nn::GPT2::parameter_table(config, colossal::core::DType::kBF16);
      narrow = table.ok() ? colossal::nn::ParameterStore::create(*table, colossal::core::Stream::cpu())
                          : absl::StatusOr<colossal::nn::ParameterStore>(table.status());
      auto ctx = colossal::core::Context::create(colossal::core::Device::cpu());
      if (!narrow.ok() || !ctx.ok()) {
        std::fprintf(stderr, "cannot make the bf16 copy\n");
        return 1;
      }
      colossal::core::Tensor out = narrow->flat_values(colossal::core::DType::kBF16);
      s = colossal::core::ops::cast(**ctx, out,
                                    (*model)->store().flat_values(colossal::core::DType::kF32));
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
      save.model = &*narrow;
    }
    absl::StatusOr<std::string> dir = colossal::nn::SaveCheckpoint(argv[1], save);
    if (dir.ok()) {
      std::printf("%s\n", dir->c_str());
      return 0;
    }
    s = dir.status();
  }
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  return 1;
}
