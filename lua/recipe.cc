#include "lua/recipe.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status/suggest.h"
#include "io/common/file_util.h"
#include "lua/api/lua_util.h"

extern "C" {
#include "lauxlib.h"
}

namespace colossal::lua {
namespace {

int Traceback(lua_State* L) {
  // Errors from the colossal module are {message, code} tables that already
  // say where: they pass unchanged.
  if (lua_istable(L, 1)) return 1;
  const char* message = lua_tostring(L, 1);
  luaL_traceback(L, L, message ? message : "(error object is not a string)", 1);
  return 1;
}

std::string ErrorText(lua_State* L) {
  const char* text = lua_tostring(L, -1);
  std::string out = text ? text : "(error object is not a string)";
  lua_pop(L, 1);
  return out;
}

}  // namespace

absl::Status LoadRecipe(lua_State* L, const std::string& path) {
  const int status = luaL_loadfilex(L, path.c_str(), "t");
  if (status == LUA_ERRFILE) {
    std::string message = ErrorText(L);  // "cannot open <path>: <reason>"
    if (io::NoSuchPath(path)) return absl::NotFoundError(message);
    return absl::FailedPreconditionError(message);  // there, but not readable (a folder, no access)
  }
  if (status != LUA_OK) return absl::InvalidArgumentError(ErrorText(L));
  lua_pushcfunction(L, Traceback);
  lua_insert(L, -2);
  const int handler = lua_gettop(L) - 1;
  if (lua_pcall(L, 0, 1, handler) != LUA_OK) {
    const ErrorInfo error = ErrorFromStack(L, -1);
    lua_pop(L, 2);  // the error and the handler
    return error.code == kErrorUsage ? absl::InvalidArgumentError(error.message)
                                     : absl::AbortedError(error.message);
  }
  lua_remove(L, handler);
  if (!lua_istable(L, -1) && !lua_isnil(L, -1)) {
    const std::string got = luaL_typename(L, -1);
    lua_pop(L, 1);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a recipe must return a table (e.g. `return { model = ... }`) or nothing (a script "
        "that trains by itself), but it returned ",
        got));
  }
  return absl::OkStatus();
}

std::vector<std::string> TableKeys(lua_State* L, int index) {
  index = lua_absindex(L, index);
  std::vector<std::string> keys;
  lua_pushnil(L);
  while (lua_next(L, index) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) keys.emplace_back(lua_tostring(L, -1));
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

absl::Status ApplyOverride(lua_State* L, int index, absl::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == absl::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--set wants key=value (e.g. optimizer.lr=3e-4), got '", assignment, "'"));
  }
  const absl::string_view path = assignment.substr(0, eq);
  const std::string text(assignment.substr(eq + 1));
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  const int top = lua_gettop(L);
  lua_pushvalue(L, index);  // the table being walked
  absl::Status result = absl::OkStatus();
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& key = parts[i];
    const std::string so_far = absl::StrJoin(parts.begin(), parts.begin() + i + 1, ".");
    // A list's entries go by position: optimizer.betas.2=0.99.
    int64_t position = 0;
    const bool by_position = absl::SimpleAtoi(key, &position) && position >= 1;
    if (by_position) {
      lua_geti(L, -1, position);
    } else {
      lua_getfield(L, -1, key.c_str());
    }
    const int type = lua_type(L, -1);
    if (type == LUA_TNIL) {
      const std::vector<std::string> keys = TableKeys(L, -2);
      const std::vector<absl::string_view> names(keys.begin(), keys.end());
      result = absl::InvalidArgumentError(absl::StrCat("--set ", path, ": the recipe has no key '",
                                                       so_far, "'", core::did_you_mean(key, names)));
      break;
    }
    if (i + 1 < parts.size()) {
      if (type != LUA_TTABLE) {
        result = absl::InvalidArgumentError(absl::StrCat(
            "--set ", path, ": '", so_far, "' is a ", lua_typename(L, type), ", not a table"));
        break;
      }
      lua_remove(L, -2);
      continue;
    }
    lua_pop(L, 1);  // the old value; the parent table is on top
    if (type == LUA_TNUMBER) {
      int64_t n = 0;
      double d = 0;
      if (absl::SimpleAtoi(text, &n)) {
        lua_pushinteger(L, n);
      } else if (absl::SimpleAtod(text, &d)) {
        lua_pushnumber(L, d);
      } else {
        result = absl::InvalidArgumentError(
            absl::StrCat("--set ", path, ": wants a number, got '", text, "'"));
        break;
      }
    } else if (type == LUA_TBOOLEAN) {
      if (text != "true" && text != "false") {
        result = absl::InvalidArgumentError(
            absl::StrCat("--set ", path, ": wants true or false, got '", text, "'"));
        break;
      }
      lua_pushboolean(L, text == "true");
    } else if (type == LUA_TSTRING) {
      lua_pushstring(L, text.c_str());
    } else {
      result = absl::InvalidArgumentError(absl::StrCat(
          "--set ", path, ": is a ", lua_typename(L, type),
          "; set one of its keys instead (a number, boolean or string)"));
      break;
    }
    if (by_position) {
      lua_seti(L, -2, position);
    } else {
      lua_setfield(L, -2, key.c_str());
    }
  }
  lua_settop(L, top);
  return result;
}

}  // namespace colossal::lua
