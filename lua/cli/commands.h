// colossal::lua::cli — the subcommands of the `colossal` binary.
//
// Each takes the arguments after its name and returns the process exit code:
//   0  success
//   1  a runtime failure (a file that exists but cannot be read, data this
//      machine lacks)
//   2  a usage error (unknown flag, missing value, a recipe that does not
//      load, a path that names nothing, input that cannot give the dataset
//      asked for, a feature this build does not have yet); data prepare maps
//      its failures as a recipe's data preparation does (ExitCodeOf)
//   run: the first failing worker's exit code.
// Errors go to stderr as "colossal <command>: <message>".
#ifndef COLOSSAL_LUA_CLI_COMMANDS_H_
#define COLOSSAL_LUA_CLI_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace colossal::lua::cli {

using Args = std::vector<std::string>;

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int CheckCommand(const Args& args);
int DataCommand(const Args& args);
// `self` is the path of this binary, which every worker runs.
int RunCommand(const Args& args, const std::string& self);
int RecipeCommand(const std::string& path, const Args& args);
// `colossal bench <recipe.lua>`: the recipe's step timed (recipe_command.cc).
int BenchCommand(const Args& args);
int GenerateCommand(const Args& args);

// Prints "colossal <command>: <message>" (plus `usage` when non-empty) to
// stderr and returns `code`.
int Fail(absl::string_view command, absl::string_view message, int code,
         absl::string_view usage = "");
// Fail() for a status: InvalidArgument -> usage error (2), else runtime (1).
int FailStatus(absl::string_view command, const absl::Status& status,
               absl::string_view usage = "");

// Whether `arg` names a subcommand or a recipe (what `colossal run` accepts).
bool IsCommandOrRecipe(absl::string_view arg);
// "; did you mean "check"?" for a misspelt subcommand, or "".
std::string SuggestCommand(absl::string_view arg);

}  // namespace colossal::lua::cli

#endif  // COLOSSAL_LUA_CLI_COMMANDS_H_
