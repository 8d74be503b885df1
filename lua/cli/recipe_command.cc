// `colossal <recipe.lua>`. Training is not wired yet; the recipe is still
// loaded so that mistakes show now. (`colossal generate`: generate.cc.)
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lua/cli/commands.h"
#include "lua/cli/flags.h"
#include "lua/recipe.h"
#include "lua/state.h"

namespace colossal::lua::cli {
namespace {

constexpr FlagSpec kRecipeFlags[] = {
    {"--set", FlagKind::kValue, "KEY=VALUE",
     "override a recipe value, e.g. --set optimizer.lr=3e-4 (repeatable)"},
};

constexpr char kMissing[] =
    "the embedded training loop and its Lua bindings to nn/ (GPT-2, optimizers, schedules), "
    "the data loader, the Booster and its plugins (parallel/) and checkpoint I/O are not "
    "wired into the CLI";

std::string RecipeUsage() {
  return absl::StrCat(
      "usage: colossal <recipe.lua> [--set key.path=value ...]\n\n"
      "Loads the recipe in the embedded Lua 5.4 interpreter (it must return a table)\n"
      "and applies the overrides. Training itself is not available in this build yet.\n\n",
      FlagHelp(kRecipeFlags));
}

}  // namespace

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
  absl::StatusOr<LuaState> state = NewState();
  if (!state.ok()) return Fail("recipe", state.status().message(), kExitFailure);
  lua_State* L = state->get();
  if (absl::Status s = LoadRecipe(L, path); !s.ok()) {
    return Fail("recipe", s.message(), s.code() == absl::StatusCode::kNotFound ? kExitFailure
                                                                               : kExitUsage);
  }
  if (flags->has("--set")) {
    for (const std::string& assignment : flags->values.at("--set")) {
      if (absl::Status s = ApplyOverride(L, -1, assignment); !s.ok()) {
        return Fail("recipe", absl::StrCat(path, ": ", s.message()), kExitUsage);
      }
    }
  }
  std::fprintf(stderr, "colossal: %s loads (keys: %s)\n", path.c_str(),
               absl::StrJoin(TableKeys(L, -1), ", ").c_str());
  return Fail("recipe",
              absl::StrCat("training from recipes is not available in this build yet: ", kMissing,
                           " (see docs/architecture.md)"),
              kExitUsage);
}

}  // namespace colossal::lua::cli
