// `colossal <recipe.lua> [--set key=value ...]`: runs a recipe.
//
// A recipe file either returns a table, which the embedded standard loop
// trains (colossal.recipe, lua/lib/recipe.lua), or returns nothing after
// training by itself through the imperative API (recipes/custom_loop.lua).
// --set overrides apply to the returned table, or, for a script, to the table
// it passes to colossal.settings{...}. (`colossal generate`: generate.cc.)
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lua/api/lua_util.h"
#include "lua/api/objects.h"
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

int StatusExit(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
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
  const std::vector<std::string> sets =
      flags->has("--set") ? flags->values.at("--set") : std::vector<std::string>{};
  absl::StatusOr<LuaState> state = NewState();
  if (!state.ok()) return Fail("recipe", state.status().message(), kExitFailure);
  lua_State* L = state->get();
  SetOverrides(L, sets);
  if (absl::Status s = LoadRecipe(L, path); !s.ok()) {
    return Fail("recipe", s.message(),
                s.code() == absl::StatusCode::kNotFound ? kExitFailure : StatusExit(s));
  }
  if (lua_isnil(L, -1)) {  // a script that trained by itself
    if (!sets.empty() && !OverridesApplied(L)) {
      return Fail("recipe",
                  absl::StrCat(path, ": --set needs a recipe that returns a table, or a script "
                                     "that passes its settings to colossal.settings{...}"),
                  kExitUsage);
    }
    return kExitOk;
  }
  if (!OverridesApplied(L)) {
    for (const std::string& assignment : sets) {
      if (absl::Status s = ApplyOverride(L, -1, assignment); !s.ok()) {
        return Fail("recipe", absl::StrCat(path, ": ", s.message()), kExitUsage);
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
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
    const ErrorInfo error = ErrorFromStack(L, -1);
    return Fail("recipe", error.message, error.code);
  }
  return kExitOk;
}

}  // namespace colossal::lua::cli
