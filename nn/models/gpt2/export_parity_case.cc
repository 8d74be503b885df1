// Writes one GPT-2 forward + backward case for tools/gpt2/parity.py, which
// recomputes it in PyTorch (float64 and float32) and compares:
//
//   bazel run //nn/models/gpt2:export_parity_case -- /tmp/parity.safetensors
//   python3 tools/gpt2/parity.py /tmp/parity.safetensors
//
// Without a path it writes gpt2_parity_case.safetensors into $OUT (when set)
// or the current folder, and it ignores --benchmark_* flags: tools/gpu/run.sh
// runs every bundled binary that is not a test with --benchmark_min_time.
//
// The model is tiny (2 layers, 4 heads, n_embd 64, vocab 97 padded to 128,
// batch 2 x 16 tokens), float32, run on the CPU and, when a GPU is usable, on
// CUDA with the same weights and tokens. The weights are GPT-2's
// initialisation (seed 1337) made less regular, so that the test sees more
// than a near-uniform attention and all-zero biases: matrices times 5, biases
// and LayerNorm weights/biases plus uniform noise in [-0.1, 0.1). The wte
// padding rows stay zero. Loss: mean cross-entropy over the 97 real classes,
// dloss = 1; gradients start from zero.
//
// File contents (safetensors, all float32 except the int32 tokens/targets):
//   params.<name>          every parameter, Hugging Face name, our shape (wte padded)
//   tokens, targets        int32 [B, T]
//   <dev>.logits           [B, T, padded_vocab]   <dev> is "cpu" and, with a GPU, "cuda"
//   <dev>.loss             [] (a scalar)
//   <dev>.grads.<name>     every parameter's gradient
//   __metadata__: "config" (JSON: n_layer, n_head, n_embd, vocab_size,
//   padded_vocab_size, max_seq_len) and "devices" ("cpu" or "cpu,cuda").
// Exit status: 0 written, 1 an error (printed), 2 usage.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/context/context.h"
#include "core/device/device.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "io/safetensors/writer.h"
#include "nn/layers/cross_entropy.h"
#include "nn/models/gpt2/gpt2.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

constexpr int64_t kBatch = 2, kSeq = 16;

// One device's results, on the host.
struct Result {
  std::string device;
  Tensor logits, grads;  // grads: the flat float32 gradient buffer
  float loss = 0;
};

// Deterministic uniform numbers in [0, 1) (an LCG; only reproducibility matters).
struct Lcg {
  uint64_t x;
  double next() {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
  }
};

GPT2Config tiny_config() {
  GPT2Config c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 97;
  c.max_seq_len = kSeq;
  return c;
}

// GPT-2 init, then the changes the file comment describes (CPU model).
absl::Status make_weights(GPT2& model) {
  COLOSSAL_RETURN_IF_ERROR(model.init(1337));
  Lcg rng{42};
  for (const Parameter& p : model.store().parameters()) {
    float* w = p.value.data<float>();
    const bool vector = absl::EndsWith(p.name, ".bias") || absl::StrContains(p.name, ".ln_");
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      w[i] = vector ? w[i] + static_cast<float>(0.2 * rng.next() - 0.1) : 5.0f * w[i];
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Result> run_on(core::Device device, const GPT2Config& config, const Tensor& weights,
                              const Tensor& tokens, const Tensor& targets) {
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<core::Context> ctx, core::Context::create(device));
  const core::Stream& stream = ctx->compute_stream();
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<GPT2> model, GPT2::create(config, DType::kF32, stream));
  COLOSSAL_RETURN_IF_ERROR(model->store().flat_values(DType::kF32).copy_from(weights, stream));
  COLOSSAL_ASSIGN_OR_RETURN(Tensor d_tokens, tokens.to(device, stream));
  COLOSSAL_ASSIGN_OR_RETURN(Tensor d_targets, targets.to(device, stream));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, model->forward(*ctx, d_tokens));
  COLOSSAL_ASSIGN_OR_RETURN(CrossEntropyResult ce,
                            cross_entropy(*ctx, out.output, d_targets, config.vocab_size, {}));
  COLOSSAL_RETURN_IF_ERROR(model->backward(*ctx, *out.saved, ce.dlogits).status());
  Result r;
  r.device = device.is_cpu() ? "cpu" : "cuda";
  r.loss = ce.loss;
  COLOSSAL_ASSIGN_OR_RETURN(r.logits, out.output.to(core::Device::cpu(), stream));
  COLOSSAL_ASSIGN_OR_RETURN(r.grads, model->store().flat_grads(DType::kF32).to(core::Device::cpu(), stream));
  ctx->synchronize();
  return r;
}

std::vector<int64_t> dims(const core::Shape& shape) {
  std::vector<int64_t> d;
  for (int i = 0; i < shape.rank(); ++i) d.push_back(shape[i]);
  return d;
}

absl::Status export_case(const std::string& path) {
  const GPT2Config config = tiny_config();
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<GPT2> model,
                            GPT2::create(config, DType::kF32, core::Stream::cpu()));
  COLOSSAL_RETURN_IF_ERROR(make_weights(*model));
  const Tensor weights = model->store().flat_values(DType::kF32);
  COLOSSAL_ASSIGN_OR_RETURN(Tensor tokens, Tensor::empty({kBatch, kSeq}, DType::kI32, core::Stream::cpu()));
  COLOSSAL_ASSIGN_OR_RETURN(Tensor targets, Tensor::empty({kBatch, kSeq}, DType::kI32, core::Stream::cpu()));
  Lcg rng{7};
  for (int64_t i = 0; i < kBatch * kSeq; ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>(rng.next() * config.vocab_size);
    targets.data<int32_t>()[i] = static_cast<int32_t>(rng.next() * config.vocab_size);
  }

  std::vector<Result> results;
  std::vector<core::Device> devices = {core::Device::cpu()};
  if (core::check_device_available(core::Device::cuda(0)).ok()) devices.push_back(core::Device::cuda(0));
  std::string device_names;
  for (core::Device d : devices) {
    absl::StatusOr<Result> r = run_on(d, config, weights, tokens, targets);
    if (!r.ok()) return core::annotate(r.status(), absl::StrCat("on ", d.is_cpu() ? "cpu" : "cuda"));
    absl::StrAppend(&device_names, device_names.empty() ? "" : ",", r->device);
    results.push_back(*std::move(r));
  }

  // The entries point into the tensors above, which outlive the write.
  std::vector<io::SafetensorsEntry> entries;
  auto add = [&entries](std::string name, const char* dtype, std::vector<int64_t> shape,
                        const void* data, uint64_t bytes) {
    entries.push_back({std::move(name), dtype, std::move(shape), data, bytes});
  };
  const std::vector<ParameterEntry>& table = model->table().entries();
  for (const ParameterEntry& e : table) {
    add("params." + e.name, "F32", dims(e.shape), weights.data<float>() + e.offset, e.numel() * 4);
  }
  add("tokens", "I32", {kBatch, kSeq}, tokens.raw_data(), tokens.nbytes());
  add("targets", "I32", {kBatch, kSeq}, targets.raw_data(), targets.nbytes());
  for (const Result& r : results) {
    add(r.device + ".logits", "F32", dims(r.logits.shape()), r.logits.raw_data(), r.logits.nbytes());
    add(r.device + ".loss", "F32", {}, &r.loss, sizeof(float));
    for (const ParameterEntry& e : table) {
      add(absl::StrCat(r.device, ".grads.", e.name), "F32", dims(e.shape),
          r.grads.data<float>() + e.offset, e.numel() * 4);
    }
  }
  const std::string json = absl::StrCat(
      "{\"n_layer\": ", config.n_layer, ", \"n_head\": ", config.n_head, ", \"n_embd\": ",
      config.n_embd, ", \"vocab_size\": ", config.vocab_size, ", \"padded_vocab_size\": ",
      config.padded_vocab_size(), ", \"max_seq_len\": ", config.max_seq_len, "}");
  COLOSSAL_RETURN_IF_ERROR(
      io::WriteSafetensors(path, entries, {{"config", json}, {"devices", device_names}}));
  std::printf("wrote %s (%zu tensors; devices: %s; cpu loss %.6f)\n", path.c_str(), entries.size(),
              device_names.c_str(), results[0].loss);
  return absl::OkStatus();
}

}  // namespace
}  // namespace colossal::nn

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    if (!absl::StartsWith(argv[i], "--benchmark_")) paths.push_back(argv[i]);
  }
  if (paths.size() > 1 || (!paths.empty() && absl::StartsWith(paths[0], "-"))) {
    std::fprintf(stderr, "usage: %s [OUT.safetensors]\n", argv[0]);
    return 2;
  }
  if (paths.empty()) {
    const char* out = std::getenv("OUT");
    paths.push_back(absl::StrCat(out != nullptr && *out != '\0' ? out : ".",
                                 "/gpt2_parity_case.safetensors"));
  }
  const absl::Status s = colossal::nn::export_case(paths[0]);
  if (!s.ok()) {
    std::fprintf(stderr, "export_parity_case: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
