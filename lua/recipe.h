// colossal::lua — loading a recipe file and applying `--set key=value`.
//
// A recipe is a Lua chunk that returns a table (recipes/gpt2_zero.lua).
// LoadRecipe runs it in the sandboxed interpreter (state.h) and leaves that
// table on top of the stack. Errors are for people: a syntax or runtime error
// keeps Lua's "file:line: message" (runtime errors add a traceback), a chunk
// that returns something else says what it returned.
//
//   COLOSSAL_ASSIGN_OR_RETURN(LuaState L, NewState());
//   COLOSSAL_RETURN_IF_ERROR(LoadRecipe(L.get(), "recipes/gpt2_zero.lua"));
//   COLOSSAL_RETURN_IF_ERROR(ApplyOverride(L.get(), -1, "optimizer.lr=3e-4"));
#ifndef COLOSSAL_LUA_RECIPE_H_
#define COLOSSAL_LUA_RECIPE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

extern "C" {
#include "lua.h"
}

namespace colossal::lua {

// Runs the recipe at `path` and pushes what it returns: a table (a
// declarative recipe) or nil (a script that ran its own loop). On error
// nothing is pushed: NotFoundError when there is no such file,
// FailedPreconditionError when it is there but cannot be read,
// InvalidArgumentError for syntax errors, the script's own mistakes, errors of
// the colossal module with code 2 and a result of another type;
// AbortedError for the module's runtime failures (code 1).
absl::Status LoadRecipe(lua_State* L, const std::string& path);

// `assignment` is "dotted.key.path=value". The key path must already exist in
// the table at `index` (no new keys: typos are errors, with a suggestion),
// and the value is parsed as the type of the value it replaces (number,
// boolean, string). Tables cannot be replaced whole.
absl::Status ApplyOverride(lua_State* L, int index, absl::string_view assignment);

// The string keys of the table at `index`, sorted.
std::vector<std::string> TableKeys(lua_State* L, int index);

}  // namespace colossal::lua

#endif  // COLOSSAL_LUA_RECIPE_H_
