// colossal's side of the Llama check against transformers (tools/hf/check_llama.py,
// run on the GPU host; not in CI):
//
//   llama_hf_case HF_DIR OUT_ROOT
//
// HF_DIR      a LlamaForCausalLM saved by transformers' save_pretrained (config.json,
//             model.safetensors) plus case.safetensors: "tokens" I32 [B, T]
// OUT_ROOT/logits.safetensors
//   logits_cpu  F32 [B, T, vocab]   colossal's float32 forward on the CPU
//   logits_cuda F32 [B, T, vocab]   the same on the GPU (when there is one)
// OUT_ROOT/step_000001/  colossal's checkpoint of the loaded model (SaveCheckpoint):
//             transformers must load it and give its own logits again.
// Exit status: 0 written, 1 an error (printed), 2 usage.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/context/context.h"
#include "core/device/device.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "io/checkpoint/checkpoint.h"
#include "io/safetensors/reader.h"
#include "io/safetensors/writer.h"
#include "nn/models/llama/config_json.h"
#include "nn/models/llama/llama.h"
#include "nn/train/checkpoint.h"
#include "parallel/checkpoint/run_checkpoint.h"

namespace {

using colossal::core::DType;
using colossal::core::Tensor;

// logits [B, T, Vp] -> float32 [B, T, V] on the host.
absl::StatusOr<std::vector<float>> real_columns(const Tensor& logits, int64_t vocab,
                                                const colossal::core::Stream& stream) {
  COLOSSAL_ASSIGN_OR_RETURN(Tensor host, logits.to(colossal::core::Device::cpu(), stream));
  stream.synchronize();
  const int64_t rows = host.dim(0) * host.dim(1), padded = host.dim(2);
  std::vector<float> out(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(&out[r * vocab], host.data<float>() + r * padded, vocab * sizeof(float));
  }
  return out;
}

absl::Status Run(const std::string& hf_dir, const std::string& root) {
  COLOSSAL_ASSIGN_OR_RETURN(std::string text, colossal::io::ReadCheckpointConfig(hf_dir));
  COLOSSAL_ASSIGN_OR_RETURN(colossal::nn::LlamaConfig config,
                            colossal::nn::LlamaConfigFromHuggingFaceJson(text, hf_dir + "/config.json"));
  COLOSSAL_ASSIGN_OR_RETURN(colossal::io::SafetensorsFile file,
                            colossal::io::SafetensorsFile::Open(hf_dir + "/case.safetensors"));
  COLOSSAL_ASSIGN_OR_RETURN(const colossal::io::SafetensorsTensor* ids, file.Get("tokens"));
  if (ids->dtype != "I32" || ids->shape.size() != 2) {
    return absl::InvalidArgumentError("case.safetensors: tokens must be I32 [B, T]");
  }
  const int64_t B = ids->shape[0], T = ids->shape[1], V = config.vocab_size;
  std::vector<std::pair<std::string, std::vector<float>>> results;
  std::unique_ptr<colossal::nn::Llama> saved_model;
  std::vector<colossal::core::Device> devices = {colossal::core::Device::cpu()};
  if (colossal::core::cuda_device_count() > 0) devices.push_back(colossal::core::Device::cuda(0));
  for (const colossal::core::Device& device : devices) {
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<colossal::core::Context> ctx,
                              colossal::core::Context::create(device));
    const colossal::core::Stream& stream = ctx->compute_stream();
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<colossal::nn::Llama> model,
                              colossal::nn::Llama::declare(config, DType::kF32));
    COLOSSAL_RETURN_IF_ERROR(model->store().allocate(stream));
    colossal::parallel::RunParts run;  // the model-only load of checkpoints, any file dtype
    run.architecture = model.get();
    run.model = &model->store();
    run.stream = &stream;
    COLOSSAL_RETURN_IF_ERROR(colossal::parallel::load_run_model(hf_dir, run));
    COLOSSAL_ASSIGN_OR_RETURN(Tensor tokens_host, Tensor::empty({B, T}, DType::kI32, colossal::core::Stream::cpu()));
    std::memcpy(tokens_host.raw_data(), ids->data.data(), tokens_host.nbytes());
    COLOSSAL_ASSIGN_OR_RETURN(Tensor tokens, tokens_host.to(device, stream));
    COLOSSAL_ASSIGN_OR_RETURN(colossal::nn::ForwardResult out, model->forward(*ctx, tokens));
    COLOSSAL_ASSIGN_OR_RETURN(std::vector<float> logits, real_columns(out.output, V, stream));
    results.push_back({device.is_cpu() ? "logits_cpu" : "logits_cuda", std::move(logits)});
    if (device.is_cpu()) {
      colossal::nn::CheckpointToSave save;
      save.step = 1;
      save.architecture = model.get();
      save.model = &model->store();
      COLOSSAL_ASSIGN_OR_RETURN(std::string dir, colossal::nn::SaveCheckpoint(root, save, {.keep_last = 0}));
      std::printf("%s\n", dir.c_str());
    }
  }
  std::vector<colossal::io::SafetensorsEntry> entries;
  for (const auto& [name, values] : results) {
    entries.push_back({name, "F32", {B, T, V}, values.data(), values.size() * sizeof(float)});
  }
  const std::string path = root + "/logits.safetensors";
  COLOSSAL_RETURN_IF_ERROR(colossal::io::WriteSafetensors(path, entries, {{"format", "pt"}}));
  std::printf("%s\n", path.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s HF_DIR OUT_ROOT\n", argv[0]);
    return 2;
  }
  const absl::Status s = Run(argv[1], argv[2]);
  if (!s.ok()) {
    std::fprintf(stderr, "llama_hf_case: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
