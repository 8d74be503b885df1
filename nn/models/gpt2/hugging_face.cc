#include "nn/models/gpt2/hugging_face.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::nn {
absl::StatusOr<GPT2Config> ReadGPT2Config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  absl::StatusOr<std::string> text = io::ReadCheckpointConfig(dir);
  if (!text.ok()) return text.status();
  absl::StatusOr<GPT2Config> c = GPT2ConfigFromHuggingFaceJson(*text);
  if (!c.ok()) return absl::Status(c.status().code(), absl::StrCat("'", path, "': ", c.status().message()));
  return c;
}

}  // namespace colossal::nn
