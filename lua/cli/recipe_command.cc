// `colossal <recipe.lua> [--set key=value ...]`: runs a recipe.
//
// A recipe file either returns a table, which the embedded standard loop
// trains (colossal.recipe, lua/lib/recipe.lua), or returns nothing after
// training by itself through the imperative API (recipes/custom_loop.lua).
// --set overrides apply to the returned table, or, for a script, to the table
// it passes to colossal.settings{...}. (`colossal generate`: generate.cc.)
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lua/api/lua_util.h"
#include "lua/api/objects.h"
#include "lua/api/runtime.h"
#include "lua/cli/commands.h"
#include "lua/cli/flags.h"
#include "lua/recipe.h"
#include "lua/state.h"

extern "C" {
#include "lauxlib.h"
}

namespace colossal::lua::cli {
namespace {

constexpr FlagSpec kRecipeFlags[] = {
    {"--set", FlagKind::kValue, "KEY=VALUE",
     "override a recipe value, e.g. --set optimizer.lr=3e-4 (repeatable)"},
};

std::string RecipeUsage() {
  return absl::StrCat(
      "usage: colossal <recipe.lua> [--set key.path=value ...]\n\n"
      "Runs a training recipe in the embedded Lua 5.4 interpreter. A recipe returns\n"
      "a table that the standard loop trains (model, data, optimizer, lr_scheduler,\n"
      "plugin, precision, steps, ...: see recipes/ and README.md), or trains by\n"
      "itself with the imperative API (recipes/custom_loop.lua). Several processes:\n"
      "colossal run --nproc_per_node N <recipe.lua>.\n\n"
      "Exit codes: 0 ok, 1 runtime failure, 2 a mistake in the recipe or flags.\n\n",
      FlagHelp(kRecipeFlags));
}

constexpr FlagSpec kBenchFlags[] = {
    {"--steps", FlagKind::kValue, "N", "timed steps (20)"},
    {"--warmup", FlagKind::kValue, "W", "untimed steps first (5)"},
    {"--trace", FlagKind::kValue, "FILE",
     "write a Chrome trace of the first timed step (FILE.rankN.json with several processes)"},
    {"--set", FlagKind::kValue, "KEY=VALUE", "override a recipe value (repeatable)"},
};

std::string BenchUsage() {
  return absl::StrCat(
      "usage: colossal bench <recipe.lua> [--steps N] [--warmup W] [--trace FILE]\n"
      "                      [--set key.path=value ...]\n\n"
      "Times a recipe's training step: W warm-up steps, then N timed steps, with no\n"
      "evaluation, checkpoints, log file or sample. Prints ms/step, tokens/s, MFU and\n"
      "peak memory, then the same as one JSON line. Several processes: colossal run\n"
      "--nproc_per_node N bench <recipe.lua>. Exit codes as for recipes.\n\n",
      FlagHelp(kBenchFlags));
}

int StatusExit(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

struct BenchSteps {
  int steps = 20;
  int warmup = 5;
  std::string trace;  // a file for the first timed step's trace, or empty
};

// Loads `path`, applies `sets` and runs colossal.recipe on the table (with
// `bench` when given); a script that trains by itself has run once loaded.
int RunRecipe(const char* command, const std::string& path, const std::vector<std::string>& sets,
              const BenchSteps* bench);

}  // namespace

int BenchCommand(const Args& args) {
  const std::string usage = BenchUsage();
  auto flags = ParseFlags(args, kBenchFlags, /*stop_at_positional=*/false);
  if (!flags.ok()) return FailStatus("bench", flags.status(), usage);
  if (flags->help) {
    std::fputs(usage.c_str(), stdout);
    return kExitOk;
  }
  if (flags->positional.size() != 1 || !absl::EndsWith(flags->positional[0], ".lua")) {
    return Fail("bench", "wants exactly one recipe (a .lua file)", kExitUsage, usage);
  }
  BenchSteps bench;
  auto steps = IntFlag(*flags, "--steps", bench.steps, 1, 1 << 24);
  if (!steps.ok()) return FailStatus("bench", steps.status(), usage);
  auto warmup = IntFlag(*flags, "--warmup", bench.warmup, 0, 1 << 24);
  if (!warmup.ok()) return FailStatus("bench", warmup.status(), usage);
  bench.steps = *steps;
  bench.warmup = *warmup;
  if (flags->has("--trace")) bench.trace = flags->values.at("--trace").back();
  if (flags->has("--trace") && bench.trace.empty()) {
    return Fail("bench", "--trace wants a file name", kExitUsage, usage);
  }
  const std::vector<std::string> sets =
      flags->has("--set") ? flags->values.at("--set") : std::vector<std::string>{};
  for (const std::string& set : sets) {
    // bench sets the step count itself; a --set steps would look obeyed.
    if (absl::StartsWith(set, "steps=")) {
      return Fail("bench", absl::StrCat(flags->positional[0], ": --set ", set,
                                        ": bench runs --warmup + --steps steps (",
                                        bench.warmup, " + ", bench.steps, "); use --steps N"),
                  kExitUsage, usage);
    }
  }
  return RunRecipe("bench", flags->positional[0], sets, &bench);
}

int RecipeCommand(const std::string& path, const Args& args) {
  const std::string usage = RecipeUsage();
  auto flags = ParseFlags(args, kRecipeFlags, /*stop_at_positional=*/false);
  if (!flags.ok()) return FailStatus("recipe", flags.status(), usage);
  if (flags->help) {
    std::fputs(usage.c_str(), stdout);
    return kExitOk;
  }
  if (!flags->positional.empty()) {
    return Fail("recipe", absl::StrCat("unexpected argument '", flags->positional[0], "'"),
                kExitUsage, usage);
  }
  const std::vector<std::string> sets =
      flags->has("--set") ? flags->values.at("--set") : std::vector<std::string>{};
  return RunRecipe("recipe", path, sets, nullptr);
}

namespace {

int RunRecipe(const char* command, const std::string& path, const std::vector<std::string>& sets,
              const BenchSteps* bench) {
  absl::StatusOr<LuaState> state = NewState();
  if (!state.ok()) return Fail(command, state.status().message(), kExitFailure);
  lua_State* L = state->get();
  SetOverrides(L, sets);
  if (absl::Status s = LoadRecipe(L, path); !s.ok()) {
    // No such file: a mistake on the command line (2); one that cannot be read: 1.
    return Fail(command, s.message(),
                s.code() == absl::StatusCode::kNotFound          ? kExitUsage
                : s.code() == absl::StatusCode::kFailedPrecondition ? kExitFailure
                                                                   : StatusExit(s));
  }
  if (lua_isnil(L, -1)) {  // a script that trained by itself
    // ... or did nothing at all: an empty file, or one that never touched the
    // colossal runtime (no model, no booster, no launch).
    if (!HasRuntime(L)) {
      return Fail(command,
                  absl::StrCat(path, ": defines no training: it returned nothing and made no "
                                     "model or booster. Return a recipe table (e.g. `return { model "
                                     "= ..., data = ..., optimizer = ..., steps = ... }`, see "
                                     "recipes/gpt2_zero.lua) or train in the script through "
                                     "colossal.booster"),
                  kExitUsage);
    }
    if (bench != nullptr) {
      return Fail(command, absl::StrCat(path, ": bench needs a recipe that returns a table"),
                  kExitUsage);
    }
    if (!sets.empty() && !OverridesApplied(L)) {
      return Fail(command,
                  absl::StrCat(path, ": --set needs a recipe that returns a table, or a script "
                                     "that passes its settings to colossal.settings{...}"),
                  kExitUsage);
    }
    return kExitOk;
  }
  if (!OverridesApplied(L)) {
    for (const std::string& assignment : sets) {
      if (absl::Status s = ApplyOverride(L, -1, assignment); !s.ok()) {
        return Fail(command, absl::StrCat(path, ": ", s.message()), kExitUsage);
      }
    }
  }
  // colossal.recipe(table, path)
  lua_getglobal(L, "require");
  lua_pushstring(L, "colossal");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "recipe");
  lua_pushvalue(L, -3);
  lua_pushstring(L, path.c_str());
  if (bench != nullptr) {
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, bench->steps);
    lua_setfield(L, -2, "steps");
    lua_pushinteger(L, bench->warmup);
    lua_setfield(L, -2, "warmup");
    if (!bench->trace.empty()) {
      lua_pushstring(L, bench->trace.c_str());
      lua_setfield(L, -2, "trace");
    }
  }
  if (lua_pcall(L, bench != nullptr ? 3 : 2, 1, 0) != LUA_OK) {
    const ErrorInfo error = ErrorFromStack(L, -1);
    return Fail(command, error.message, error.code);
  }
  // A run stopped by SIGTERM or SIGINT (after saving) exits as the signal
  // would have: 128 + its number, which schedulers and launchers read.
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "stopped_by");
    const char* by = lua_tostring(L, -1);
    if (by != nullptr) return 128 + (std::string(by) == "SIGINT" ? SIGINT : SIGTERM);
  }
  return kExitOk;
}

}  // namespace

}  // namespace colossal::lua::cli
