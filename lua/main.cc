// colossal: the command-line front end.
//
//   colossal check                       build and machine: CUDA, NCCL, cuDNN, GPUs, Lua, OpenBLAS
//   colossal data prepare --input ... --output DIR
//   colossal run --nproc_per_node N <recipe.lua | command> [args]
//   colossal <recipe.lua> [--set key=value ...]
//   colossal generate --checkpoint DIR --prompt TEXT [--max_new_tokens N] [--temperature T] ...
//   colossal bench <recipe.lua> [--steps N] [--warmup W] [--set key=value ...]
//
// Exit codes: 0 ok, 1 runtime failure, 2 usage error; `run` returns the
// failing worker's code. See lua/cli/commands.h.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lua/cli/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: colossal <command> [args]      (colossal <command> --help for its options)\n"
    "\n"
    "commands:\n"
    "  check                     the build (CUDA, NCCL, cuDNN, Lua, OpenBLAS) and the GPUs here\n"
    "  data prepare              tokenize text into token shards (GPT-2 or Hugging Face tokenizer)\n"
    "  run                       start workers on this node, torchrun-style\n"
    "  <recipe.lua> [--set k=v]  train from a recipe\n"
    "  generate                  continue a prompt with a checkpoint's GPT-2 or Llama (CPU)\n"
    "  bench <recipe.lua>        time a recipe's training step (ms/step, tokens/s, MFU, memory)\n"
    "\n"
    "exit codes: 0 ok, 1 runtime failure, 2 usage error; run: the failing worker's code\n";

// The path of this binary, which `colossal run` starts as its workers.
std::string SelfPath(const char* argv0) {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n > 0) return std::string(buffer, n);
  return argv0;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = colossal::lua::cli;
  const cli::Args all(argv + 1, argv + argc);
  if (all.empty()) {
    std::fputs(kUsage, stderr);
    return cli::kExitUsage;
  }
  const std::string& command = all[0];
  const cli::Args rest(all.begin() + 1, all.end());
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return cli::kExitOk;
  }
  if (command == "check") return cli::CheckCommand(rest);
  if (command == "data") return cli::DataCommand(rest);
  if (command == "run") return cli::RunCommand(rest, SelfPath(argv[0]));
  if (command == "generate") return cli::GenerateCommand(rest);
  if (command == "bench") return cli::BenchCommand(rest);
  if (absl::EndsWith(command, ".lua")) return cli::RecipeCommand(command, rest);
  return cli::Fail("", absl::StrCat("unknown command '", command, "'", cli::SuggestCommand(command)),
                   cli::kExitUsage, kUsage);
}
