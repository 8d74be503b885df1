// A command line over PrepareDataset, for trying it by hand and timing it
// (`colossal data prepare` in the Lua CLI is the user-facing one):
//
//   bazel build -c opt //io/prepare:prepare_tool
//   bazel-bin/io/prepare/prepare_tool --out data/shakespeare --name shakespeare
//       --tokenizer ~/.cache/colossal/data/gpt2.tiktoken ~/.cache/colossal/data/corpus/shakespeare
//   (one line)
//
// Flags: --out DIR, --tokenizer FILE, --name NAME, --val FRACTION,
// --shard_tokens N, --threads N, --split file|paragraph; then inputs.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io/prepare/prepare.h"

namespace {

int Usage(const char* argv0, const char* why) {
  std::fprintf(stderr,
               "%s\nusage: %s --out DIR --tokenizer FILE [--name NAME] [--val FRACTION] [--shard_tokens N] "
               "[--threads N] [--split file|paragraph] INPUT...\n",
               why, argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  colossal::io::PrepareOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      options.inputs.push_back(arg);
      continue;
    }
    if (i + 1 >= argc) return Usage(argv[0], ("missing value for " + arg).c_str());
    const char* value = argv[++i];
    if (arg == "--out") {
      options.output_dir = value;
    } else if (arg == "--tokenizer") {
      options.tokenizer_path = value;
    } else if (arg == "--name") {
      options.name = value;
    } else if (arg == "--val") {
      options.val_fraction = std::strtod(value, nullptr);
    } else if (arg == "--shard_tokens") {
      options.shard_tokens = std::strtoll(value, nullptr, 10);
    } else if (arg == "--threads") {
      options.threads = std::atoi(value);
    } else if (arg == "--split") {
      if (std::strcmp(value, "file") == 0) {
        options.split = colossal::io::DocumentSplit::kFile;
      } else if (std::strcmp(value, "paragraph") == 0) {
        options.split = colossal::io::DocumentSplit::kParagraph;
      } else {
        return Usage(argv[0], "--split is file or paragraph");
      }
    } else {
      return Usage(argv[0], ("unknown flag " + arg).c_str());
    }
  }
  options.progress = [](const colossal::io::PrepareProgress& p) {
    const double share = p.bytes_total == 0 ? 1.0 : static_cast<double>(p.bytes_done) / p.bytes_total;
    const int width = 40, filled = static_cast<int>(share * width);
    std::fprintf(stderr, "\r[%.*s%*s] %5.1f%%  %lld tokens", filled, "========================================",
                 width - filled, "", 100 * share, static_cast<long long>(p.tokens_done));
  };
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<colossal::io::PrepareResult> result = colossal::io::PrepareDataset(options);
  std::fprintf(stderr, "\n");
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("train: %lld documents, %llu bytes, %lld tokens\nval:   %lld documents, %llu bytes, %lld tokens\n",
              static_cast<long long>(result->train_documents), static_cast<unsigned long long>(result->train_bytes),
              static_cast<long long>(result->train_tokens), static_cast<long long>(result->val_documents),
              static_cast<unsigned long long>(result->val_bytes), static_cast<long long>(result->val_tokens));
  for (const colossal::io::PreparedShard& s : result->shards) {
    std::printf("  %s  %lld tokens\n", s.file.c_str(), static_cast<long long>(s.tokens));
  }
  std::printf("%s  (%.2f s)\n", result->manifest_path.c_str(), seconds);
  return 0;
}
