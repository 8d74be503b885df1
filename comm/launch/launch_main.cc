// launch: start N workers of this node with torchrun's variables.
//
//   launch --nproc_per_node 4 [--nnodes 2 --node_rank 0] [--master_addr host]
//          [--master_port 29500] [--grace_seconds 10] [--no_prefix] -- program args...
//
// Output lines are prefixed with "[rank N] "; SIGINT/SIGTERM are forwarded;
// the first failing worker's exit code is returned and named on stderr.
// (`colossal run` offers the same through the main CLI.)
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/launch/launch.h"
#include "core/status/suggest.h"

namespace {

constexpr char kUsage[] =
    "usage: launch [--nproc_per_node N] [--nnodes N] [--node_rank N] [--master_addr HOST]\n"
    "              [--master_port PORT] [--grace_seconds S] [--no_prefix] -- PROGRAM [ARGS...]\n";

int fail(const std::string& message) {
  std::fprintf(stderr, "launch: %s\n%s", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using colossal::comm::LaunchOptions;
  LaunchOptions o;
  const std::vector<absl::string_view> flags = {"--nproc_per_node", "--nnodes",
                                                "--node_rank",      "--master_addr",
                                                "--master_port",    "--grace_seconds",
                                                "--no_prefix"};
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("--", 0) != 0) break;  // the program starts here
    if (arg == "--no_prefix") {
      o.prefix_output = false;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return fail(absl::StrCat(arg, " needs a value"));
    }
    int number = 0;
    const bool is_number = absl::SimpleAtoi(value, &number);
    if (arg == "--master_addr") {
      o.master_addr = value;
      continue;
    }
    bool known = false;
    for (absl::string_view f : flags) known = known || f == arg;
    if (!known) {
      return fail(absl::StrCat("unknown flag ", arg, colossal::core::did_you_mean(arg, flags)));
    }
    if (!is_number) return fail(absl::StrCat(arg, " wants an integer, got '", value, "'"));
    if (arg == "--nproc_per_node") o.nproc_per_node = number;
    if (arg == "--nnodes") o.nnodes = number;
    if (arg == "--node_rank") o.node_rank = number;
    if (arg == "--master_port") o.master_port = number;
    if (arg == "--grace_seconds") o.grace_period = absl::Seconds(number);
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.command.empty()) return fail("no program given");
  signal(SIGPIPE, SIG_IGN);
  auto result = colossal::comm::launch(o);
  if (!result.ok()) {
    std::fprintf(stderr, "launch: %s\n", std::string(result.status().message()).c_str());
    return 2;
  }
  if (result->exit_code != 0) std::fprintf(stderr, "launch: %s\n", result->message.c_str());
  return result->exit_code;
}
