// `colossal run`: start workers of this node through comm/launch, each
// running this same binary with the remaining arguments, like torchrun.
#include <signal.h>

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/launch/launch.h"
#include "io/common/file_util.h"
#include "lua/cli/commands.h"
#include "lua/cli/flags.h"

namespace colossal::lua::cli {
namespace {

constexpr FlagSpec kRunFlags[] = {
    {"--nproc_per_node", FlagKind::kValue, "N", "workers on this node (1)"},
    {"--nnodes", FlagKind::kValue, "N", "nodes in the job (1)"},
    {"--node_rank", FlagKind::kValue, "R", "this node's index, 0..nnodes-1 (0)"},
    {"--master_addr", FlagKind::kValue, "HOST", "rank 0's host (127.0.0.1)"},
    {"--master_port", FlagKind::kValue, "PORT", "rank 0's port (29500)"},
    {"--stop_timeout", FlagKind::kValue, "S",
     "after a SIGINT/SIGTERM, seconds the workers get to save and stop (600)"},
};

std::string RunUsage() {
  return absl::StrCat(
      "usage: colossal run [options] <recipe.lua | command> [args...]\n\n"
      "Starts nproc_per_node workers with torchrun's variables (RANK, LOCAL_RANK,\n"
      "WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT); each runs\n"
      "`colossal <recipe.lua | command> [args...]`. Output lines are prefixed with\n"
      "\"[rank N] \"; when a worker fails the others are stopped and its exit code\n"
      "is returned. SIGINT and SIGTERM are passed on: the workers finish their step,\n"
      "save it and exit (a second signal stops them at once). Multi-node: one\n"
      "`colossal run` per node, same --nnodes, --master_addr and --master_port,\n"
      "--node_rank 0..nnodes-1, and the same COLOSSAL_JOB_ID on every node if two\n"
      "jobs could share the port.\n\n"
      "  colossal run --nproc_per_node 2 check\n\n",
      FlagHelp(kRunFlags));
}

}  // namespace

int RunCommand(const Args& args, const std::string& self) {
  const std::string usage = RunUsage();
  auto flags = ParseFlags(args, kRunFlags, /*stop_at_positional=*/true);
  if (!flags.ok()) return FailStatus("run", flags.status(), usage);
  if (flags->help) {
    std::fputs(usage.c_str(), stdout);
    return kExitOk;
  }
  if (flags->positional.empty()) {
    return Fail("run", "no recipe or command to run", kExitUsage, usage);
  }
  const std::string& what = flags->positional[0];
  if (!IsCommandOrRecipe(what)) {
    return Fail("run",
                absl::StrCat("'", what, "' is neither a recipe (*.lua) nor a colossal command",
                             SuggestCommand(what)),
                kExitUsage, usage);
  }
  if (what == "run") return Fail("run", "workers cannot start workers (run inside run)", kExitUsage);
  // A recipe that is not there fails here, once, instead of in every worker.
  if (absl::EndsWith(what, ".lua") && io::NoSuchPath(what)) {
    return Fail("run", absl::StrCat("cannot open ", what, ": no such file"), kExitUsage);
  }
  comm::LaunchOptions o;
  auto nproc = IntFlag(*flags, "--nproc_per_node", 1, 1, 1024);
  auto nnodes = IntFlag(*flags, "--nnodes", 1, 1, 65536);
  auto node_rank = IntFlag(*flags, "--node_rank", 0, 0, 65535);
  auto port = IntFlag(*flags, "--master_port", comm::LaunchOptions().master_port, 1, 65535);
  auto stop_timeout = IntFlag(*flags, "--stop_timeout",
                              absl::ToInt64Seconds(comm::LaunchOptions().stop_timeout), 1, 7 * 24 * 3600);
  for (const auto* v : {&nproc, &nnodes, &node_rank, &port, &stop_timeout}) {
    if (!v->ok()) return FailStatus("run", v->status(), usage);
  }
  if (*node_rank >= *nnodes) {
    return Fail("run", absl::StrCat("--node_rank ", *node_rank, " must be below --nnodes ", *nnodes),
                kExitUsage, usage);
  }
  o.nproc_per_node = *nproc;
  o.nnodes = *nnodes;
  o.node_rank = *node_rank;
  o.master_port = *port;
  o.stop_timeout = absl::Seconds(*stop_timeout);
  o.master_addr = flags->value("--master_addr", o.master_addr);
  o.command.push_back(self);
  o.command.insert(o.command.end(), flags->positional.begin(), flags->positional.end());
  signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<comm::LaunchResult> result = comm::launch(o);
  if (!result.ok()) return Fail("run", result.status().message(), kExitFailure);
  if (result->exit_code != 0) {
    std::fprintf(stderr, "colossal run: %s\n", result->message.c_str());
  }
  return result->exit_code;
}

}  // namespace colossal::lua::cli
