// Writes a checkpoint of a tiny randomly initialised GPT-2 (2 layers, 2 heads,
// n_embd 8, vocab 11, context 4) for check_hf_checkpoint.py (not run in CI):
//
//   bazel run //nn/train:write_tiny_checkpoint -- /tmp/tiny_ckpt
//   python3 tools/hf/check_hf_checkpoint.py /tmp/tiny_ckpt/step_000001
// An optional second argument is max_shard_bytes (e.g. 1024: a sharded save).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "nn/models/gpt2/gpt2.h"
#include "nn/models/gpt2/hugging_face.h"
#include "nn/train/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s OUT_ROOT [MAX_SHARD_BYTES]\n", argv[0]);
    return 2;
  }
  colossal::nn::GPT2Config config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 8;
  config.vocab_size = 11;
  config.max_seq_len = 4;
  config.padded_vocab_multiple = 8;
  absl::StatusOr<std::unique_ptr<colossal::nn::GPT2>> model =
      colossal::nn::GPT2::create(config, colossal::core::DType::kF32, colossal::core::Stream::cpu());
  absl::Status s = model.ok() ? (*model)->init(1337) : model.status();
  if (s.ok()) {
    colossal::nn::CheckpointToSave save;
    save.step = 1;
    save.architecture = model->get();
    save.model = &(*model)->store();
    colossal::io::CheckpointOptions options;
    if (argc == 3) options.max_shard_bytes = std::strtoull(argv[2], nullptr, 10);
    absl::StatusOr<std::string> dir = colossal::nn::SaveCheckpoint(argv[1], save, options);
    if (dir.ok()) {
      std::printf("%s\n", dir->c_str());
      return 0;
    }
    s = dir.status();
  }
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  return 1;
}
