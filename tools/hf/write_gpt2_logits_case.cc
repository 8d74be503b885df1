// Writes a checkpoint of a small random GPT-2 and colossal's float32 CPU logits
// for fixed tokens, for check_gpt2_lm_head.py (transformers' GPT2LMHeadModel
// must load the checkpoint and give the same logits; not run in CI):
//
//   bazel run //tools/hf:write_gpt2_logits_case -- /tmp/hf_case [MAX_SHARD_BYTES]
//   python3 tools/hf/check_gpt2_lm_head.py /tmp/hf_case/step_000001 /tmp/hf_case/logits.safetensors
//
// OUT_ROOT/step_000001/    io/checkpoint's SaveCheckpoint (model only); with
//                          MAX_SHARD_BYTES (e.g. 100000) a sharded save
// OUT_ROOT/logits.safetensors
//   tokens  I32 [2, 16]              fixed pseudo-random ids in [0, vocab_size)
//   logits  F32 [2, 16, padded_vocab]  colossal's forward on the CPU
//
// The model: 2 layers, 4 heads, n_embd 64, vocab 97 (padded to 128), context
// 16; GPT-2's initialisation (seed 1337) with every parameter moved by
// uniform noise of +-0.05 (biases and LayerNorm weights are otherwise all
// 0 / 1, which would hide a mix-up between them); wte's padding rows stay zero.
// Exit status: 0 written, 1 an error (printed), 2 usage.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/context/context.h"
#include "core/device/device.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "io/checkpoint/checkpoint.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/models/gpt2/hugging_face.h"
#include "nn/train/checkpoint.h"
#include "io/safetensors/writer.h"

namespace {

using colossal::core::DType;
using colossal::core::Tensor;

constexpr int64_t kBatch = 2, kSeq = 16;

// Deterministic numbers in [0, 1).
struct Lcg {
  uint64_t x;
  double next() {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
  }
};

absl::Status Write(const std::string& root, uint64_t max_shard_bytes) {
  colossal::nn::GPT2Config config;
  config.n_layer = 2;
  config.n_head = 4;
  config.n_embd = 64;
  config.vocab_size = 97;
  config.max_seq_len = kSeq;
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<colossal::core::Context> ctx,
                            colossal::core::Context::create(colossal::core::Device::cpu()));
  const colossal::core::Stream& stream = ctx->compute_stream();
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<colossal::nn::GPT2> model,
                            colossal::nn::GPT2::create(config, DType::kF32, stream));
  COLOSSAL_RETURN_IF_ERROR(model->init(1337));
  Lcg rng{2026};
  for (const colossal::nn::Parameter& p : model->store().parameters()) {
    float* w = p.value.data<float>();
    // wte's padding rows (past vocab_size) stay zero: the checkpoint leaves them out.
    const int64_t n = p.name == "transformer.wte.weight" ? config.vocab_size * config.n_embd : p.value.numel();
    for (int64_t i = 0; i < n; ++i) w[i] += static_cast<float>(0.1 * rng.next() - 0.05);
  }

  COLOSSAL_ASSIGN_OR_RETURN(Tensor tokens, Tensor::empty({kBatch, kSeq}, DType::kI32, stream));
  for (int64_t i = 0; i < kBatch * kSeq; ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>(rng.next() * config.vocab_size);
  }
  COLOSSAL_ASSIGN_OR_RETURN(colossal::nn::ForwardResult out, model->forward(*ctx, tokens));
  ctx->synchronize();
  const Tensor& logits = out.output;

  colossal::nn::CheckpointToSave save;
  save.step = 1;
  save.architecture = model.get();
  save.model = &model->store();
  colossal::io::CheckpointOptions options;
  if (max_shard_bytes > 0) options.max_shard_bytes = max_shard_bytes;
  COLOSSAL_ASSIGN_OR_RETURN(std::string dir, colossal::nn::SaveCheckpoint(root, save, options));

  const std::vector<colossal::io::SafetensorsEntry> entries = {
      {"tokens", "I32", {kBatch, kSeq}, tokens.raw_data(), static_cast<uint64_t>(tokens.nbytes())},
      {"logits", "F32", {kBatch, kSeq, config.padded_vocab_size()}, logits.raw_data(),
       static_cast<uint64_t>(logits.nbytes())},
  };
  const std::string logits_path = root + "/logits.safetensors";
  COLOSSAL_RETURN_IF_ERROR(colossal::io::WriteSafetensors(logits_path, entries, {{"format", "pt"}}));
  std::printf("%s\n%s\n", dir.c_str(), logits_path.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s OUT_ROOT [MAX_SHARD_BYTES]\n", argv[0]);
    return 2;
  }
  const absl::Status s = Write(argv[1], argc == 3 ? std::strtoull(argv[2], nullptr, 10) : 0);
  if (!s.ok()) {
    std::fprintf(stderr, "write_gpt2_logits_case: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
