#include "lua/api/lua_util.h"

#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "core/status/suggest.h"

namespace colossal::lua {
namespace {

// "file:line: " of the Lua code that called the running C function, or "".
std::string Where(lua_State* L) {
  luaL_where(L, 1);
  std::string where = lua_tostring(L, -1);
  lua_pop(L, 1);
  return where;
}

}  // namespace

int ExitCodeOf(absl::StatusCode code) {
  const bool usage = code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kOutOfRange ||
                     code == absl::StatusCode::kNotFound || code == absl::StatusCode::kUnimplemented ||
                     code == absl::StatusCode::kAlreadyExists;
  return usage ? kErrorUsage : kErrorRuntime;
}

void RaiseError(lua_State* L, absl::string_view message, int code, absl::string_view key) {
  throw LuaError{absl::StrCat(Where(L), message), code, /*environment=*/false, std::string(key)};
}

void RaiseStatus(lua_State* L, absl::string_view context, const absl::Status& status) {
  RaiseError(L, absl::StrCat(context, context.empty() ? "" : ": ", status.message()),
             ExitCodeOf(status.code()), core::option_key(status).value_or(""));
}

void RaiseEnvironmentError(const absl::Status& status) {
  // No Lua position: the line that happened to read the variable is not the
  // mistake. A message that already says so ("environment variable X=...")
  // gets no "environment: " in front.
  const bool says_so = absl::StartsWith(status.message(), "environment variable ");
  throw LuaError{absl::StrCat(says_so ? "" : "environment: ", status.message()), ExitCodeOf(status.code()),
                 /*environment=*/true, /*key=*/{}};
}

void PushError(lua_State* L, const LuaError& error) {
  lua_createtable(L, 0, 4);
  lua_pushlstring(L, error.message.data(), error.message.size());
  lua_setfield(L, -2, "message");
  lua_pushinteger(L, error.code);
  lua_setfield(L, -2, "code");
  if (error.environment) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "environment");
  }
  if (!error.key.empty()) {
    lua_pushlstring(L, error.key.data(), error.key.size());
    lua_setfield(L, -2, "key");
  }
  lua_pushcfunction(L, [](lua_State* S) -> int {
    lua_getfield(S, 1, "message");
    return 1;
  });
  // tostring(err) gives the message (error tables from bindings print well).
  lua_createtable(L, 0, 1);
  lua_insert(L, -2);
  lua_setfield(L, -2, "__tostring");
  lua_setmetatable(L, -2);
}

ErrorInfo ErrorFromStack(lua_State* L, int index) {
  index = lua_absindex(L, index);
  ErrorInfo info;
  if (lua_istable(L, index)) {
    lua_getfield(L, index, "message");
    const char* m = lua_tostring(L, -1);
    info.message = m ? m : "(error without a message)";
    lua_getfield(L, index, "code");
    info.code = lua_isinteger(L, -1) ? static_cast<int>(lua_tointeger(L, -1)) : kErrorRuntime;
    lua_pop(L, 2);
    return info;
  }
  const char* m = lua_tostring(L, index);
  info.message = m ? m : absl::StrCat("(error object is a ", luaL_typename(L, index), ")");
  info.code = kErrorUsage;
  return info;
}

OptionTable::OptionTable(lua_State* L, int index, std::string what)
    : L_(L), index_(lua_absindex(L, index)), what_(std::move(what)) {
  const int type = lua_type(L, index_);
  if (type != LUA_TTABLE && type != LUA_TNIL && type != LUA_TNONE) {
    RaiseError(L, absl::StrCat(what_, ": wants a table of options, got a ", luaL_typename(L, index_)),
               kErrorUsage);
  }
  if (type != LUA_TTABLE) index_ = 0;
}

int OptionTable::fetch(const char* key) {
  known_.insert(key);
  if (index_ == 0) {
    lua_pushnil(L_);
    return LUA_TNIL;
  }
  return lua_getfield(L_, index_, key);
}

void OptionTable::fail(const char* key, absl::string_view why) {
  RaiseError(L_, absl::StrCat(what_, ": ", key, " ", why), kErrorUsage, key);
}

bool OptionTable::has(const char* key) {
  const int type = fetch(key);
  lua_pop(L_, 1);
  return type != LUA_TNIL;
}

std::optional<double> OptionTable::number(const char* key) {
  const int type = fetch(key);
  if (type == LUA_TNIL) {
    lua_pop(L_, 1);
    return std::nullopt;
  }
  if (type != LUA_TNUMBER) {
    const std::string got = luaL_typename(L_, -1);
    lua_pop(L_, 1);
    fail(key, absl::StrCat("must be a number, got a ", got));
  }
  const double value = lua_tonumber(L_, -1);
  lua_pop(L_, 1);
  if (!std::isfinite(value)) fail(key, "must be finite");
  return value;
}

double OptionTable::number(const char* key, double fallback) {
  return number(key).value_or(fallback);
}

int64_t OptionTable::integer(const char* key, int64_t fallback) {
  const int type = fetch(key);
  if (type == LUA_TNIL) {
    lua_pop(L_, 1);
    return fallback;
  }
  int ok = 0;
  const lua_Integer value = lua_tointegerx(L_, -1, &ok);
  const std::string got = type == LUA_TNUMBER ? "a fractional number" : luaL_typename(L_, -1);
  lua_pop(L_, 1);
  if (type != LUA_TNUMBER || !ok) fail(key, absl::StrCat("must be an integer, got ", got));
  return value;
}

int OptionTable::int32(const char* key, int fallback) {
  const int64_t value = integer(key, fallback);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    fail(key, absl::StrCat("= ", value, " is out of range (at most ",
                           std::numeric_limits<int>::max(), " in magnitude)"));
  }
  return static_cast<int>(value);
}

bool OptionTable::boolean(const char* key, bool fallback) {
  const int type = fetch(key);
  if (type == LUA_TNIL) {
    lua_pop(L_, 1);
    return fallback;
  }
  const bool value = lua_toboolean(L_, -1);
  const std::string got = luaL_typename(L_, -1);
  lua_pop(L_, 1);
  if (type != LUA_TBOOLEAN) fail(key, absl::StrCat("must be true or false, got a ", got));
  return value;
}

std::string OptionTable::string(const char* key, const std::string& fallback) {
  const int type = fetch(key);
  if (type == LUA_TNIL) {
    lua_pop(L_, 1);
    return fallback;
  }
  if (type != LUA_TSTRING) {
    const std::string got = luaL_typename(L_, -1);
    lua_pop(L_, 1);
    fail(key, absl::StrCat("must be a string, got a ", got));
  }
  std::string value = lua_tostring(L_, -1);
  lua_pop(L_, 1);
  return value;
}

std::optional<std::vector<double>> OptionTable::numbers(const char* key, size_t n) {
  const int type = fetch(key);
  if (type == LUA_TNIL) {
    lua_pop(L_, 1);
    return std::nullopt;
  }
  std::vector<double> values;
  bool ok = type == LUA_TTABLE && luaL_len(L_, -1) == static_cast<lua_Integer>(n);
  for (size_t i = 1; ok && i <= n; ++i) {
    ok = lua_geti(L_, -1, static_cast<lua_Integer>(i)) == LUA_TNUMBER;
    if (ok) values.push_back(lua_tonumber(L_, -1));
    lua_pop(L_, 1);
  }
  lua_pop(L_, 1);
  if (!ok) fail(key, absl::StrCat("must be a list of ", n, " numbers, e.g. {0.9, 0.95}"));
  return values;
}

std::optional<std::vector<int64_t>> OptionTable::integers(const char* key) {
  const int type = fetch(key);
  if (type == LUA_TNIL) {
    lua_pop(L_, 1);
    return std::nullopt;
  }
  std::vector<int64_t> values;
  bool ok = type == LUA_TTABLE;
  const lua_Integer n = ok ? luaL_len(L_, -1) : 0;
  for (lua_Integer i = 1; ok && i <= n; ++i) {
    lua_geti(L_, -1, i);
    ok = lua_isinteger(L_, -1);
    if (ok) values.push_back(lua_tointeger(L_, -1));
    lua_pop(L_, 1);
  }
  lua_pop(L_, 1);
  if (!ok) fail(key, "must be a list of integers, e.g. {4, 6, 6, 8}");
  return values;
}

int OptionTable::push(const char* key) { return fetch(key); }

void OptionTable::allow(std::initializer_list<const char*> keys) {
  for (const char* k : keys) known_.insert(k);
}

void OptionTable::finish() {
  if (index_ == 0) return;
  std::vector<absl::string_view> names(known_.begin(), known_.end());
  lua_pushnil(L_);
  while (lua_next(L_, index_) != 0) {
    lua_pop(L_, 1);
    if (lua_type(L_, -1) != LUA_TSTRING) {
      lua_pop(L_, 1);
      RaiseError(L_, absl::StrCat(what_, ": option names must be strings"), kErrorUsage);
    }
    const std::string key = lua_tostring(L_, -1);
    if (known_.count(key) == 0) {
      lua_pop(L_, 1);
      RaiseError(L_,
                 absl::StrCat(what_, ": unknown option '", key, "'", core::did_you_mean(key, names)),
                 kErrorUsage, key);
    }
  }
}

std::string StringArg(lua_State* L, int index, bool non_empty, absl::string_view message) {
  size_t n = 0;
  const char* s = lua_type(L, index) == LUA_TSTRING ? lua_tolstring(L, index, &n) : nullptr;
  if (s == nullptr || (non_empty && n == 0)) RaiseError(L, message, kErrorUsage);
  return std::string(s, n);
}

void PushNumberTable(lua_State* L, const std::vector<std::pair<const char*, double>>& fields) {
  lua_createtable(L, 0, static_cast<int>(fields.size()));
  for (const auto& [name, value] : fields) {
    lua_pushnumber(L, value);
    lua_setfield(L, -2, name);
  }
}

}  // namespace colossal::lua
