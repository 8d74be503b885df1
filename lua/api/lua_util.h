// colossal::lua — the plumbing every binding of the `colossal` Lua module uses:
// errors that carry an exit code, userdata holding shared_ptrs, and strict
// option tables.
//
// Errors. Bindings throw LuaError (RaiseError/RaiseStatus), never call
// lua_error themselves: Debian's Lua is C and unwinds with longjmp, which
// would skip C++ destructors. Every binding is registered through
// Protected<F>, which catches the exception after F's frame is unwound and
// only then raises a Lua error whose object is a table
//   { message = "recipe.lua:12: colossal.optim.adamw: lr must be ...", code = 2 }
// code 2 for the user's mistakes (absl InvalidArgument, NotFound of a named
// key, ...), 1 for runtime failures. The message starts with the position of
// the Lua code that called the binding ("file:line: "), as luaL_error's do.
// The CLI prints the message and exits with the code; Lua code may pcall and
// inspect both (the embedded recipe loop does, to point at the recipe key).
// An error caused by an environment variable (RaiseEnvironmentError) reads
// "environment: <message naming the variable and its value>" (or the message
// alone when it starts "environment variable "), without the Lua position,
// and its table has environment = true: the recipe loop then blames no
// recipe key.
//
// Userdata. Handle<T> objects live in a userdata as a std::shared_ptr<T> with
// a metatable named T::kMetatable: other objects (an optimizer, a booster)
// keep the shared_ptr of what they use, so Lua's collection order does not
// matter. `__gc` drops the userdata's reference.
//
// Options. OptionTable reads a Lua table of options by name, checking each
// type, and finish() rejects every key nobody asked for with a suggestion:
//   OptionTable o(L, 1, "colossal.optim.adamw");
//   double lr = o.number("lr", 1e-3);
//   o.finish();   // "unknown option 'betta' (did you mean 'betas'?)"
#ifndef COLOSSAL_LUA_API_LUA_UTIL_H_
#define COLOSSAL_LUA_API_LUA_UTIL_H_

#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

extern "C" {
#include "lauxlib.h"
#include "lua.h"
}

namespace colossal::lua {

inline constexpr int kErrorRuntime = 1;
inline constexpr int kErrorUsage = 2;

struct LuaError {
  std::string message;  // with the caller's "file:line: " in front (not for the environment's)
  int code = kErrorRuntime;
  bool environment = false;  // caused by an environment variable, not by the calling code
  // The option (a key of the table the binding took, a config field) the
  // error is about, when it is about one: the recipe loop raises the error
  // at the line that set it. Empty otherwise.
  std::string key;
};

// The exit code of an error of status `code`: kErrorUsage for the user's
// names and values (InvalidArgument, OutOfRange, NotFound, Unimplemented,
// AlreadyExists), else kErrorRuntime. RaiseStatus uses it, and CLI commands
// that share a binding's causes (data prepare) too, so that one cause exits
// with one code either way.
int ExitCodeOf(absl::StatusCode code);

// Throws LuaError{where .. message, code, key}.
[[noreturn]] void RaiseError(lua_State* L, absl::string_view message, int code,
                             absl::string_view key = {});
// RaiseError with `context: status.message()`, code ExitCodeOf(status.code())
// and the option key the status carries (core::option_key), if any.
[[noreturn]] void RaiseStatus(lua_State* L, absl::string_view context, const absl::Status& status);
// Raises `status`, whose message names an environment variable and its
// value, as the environment's mistake (see above); codes as RaiseStatus.
[[noreturn]] void RaiseEnvironmentError(const absl::Status& status);
// Raises when !status.ok().
inline void ThrowIfError(lua_State* L, absl::string_view context, const absl::Status& status) {
  if (!status.ok()) RaiseStatus(L, context, status);
}

// Pushes { message = ..., code = ... [, environment = true] [, key = ...] }.
void PushError(lua_State* L, const LuaError& error);

// The C function Lua calls for binding F: runs F, turning a LuaError (or any
// std::exception: code 1) into a Lua error.
template <lua_CFunction F>
int Protected(lua_State* L) {
  LuaError error;
  try {
    return F(L);
  } catch (const LuaError& e) {
    error = e;
  } catch (const std::exception& e) {
    error = LuaError{e.what(), kErrorRuntime, /*environment=*/false, /*key=*/{}};
  }
  PushError(L, error);
  error = LuaError{};  // nothing left to destroy when lua_error jumps
  return lua_error(L);
}

// The text and exit code of an error object that reached the top of `L`
// (a table from RaiseError, or a string from Lua itself: code 2, the
// script's own mistake).
struct ErrorInfo {
  std::string message;
  int code = kErrorUsage;
};
ErrorInfo ErrorFromStack(lua_State* L, int index);

// Pushes a new userdata holding `value` with metatable T::kMetatable (which
// must have been registered with RegisterType<T>).
template <class T>
void PushHandle(lua_State* L, std::shared_ptr<T> value) {
  void* memory = lua_newuserdatauv(L, sizeof(std::shared_ptr<T>), 0);
  new (memory) std::shared_ptr<T>(std::move(value));
  luaL_setmetatable(L, T::kMetatable);
}

// The shared_ptr in the userdata at `index`; raises a type error naming
// T::kTypeName otherwise.
template <class T>
std::shared_ptr<T>& CheckHandle(lua_State* L, int index) {
  void* memory = luaL_testudata(L, index, T::kMetatable);
  if (memory == nullptr) {
    RaiseError(L,
               std::string("argument ") + std::to_string(index) + ": expected " + T::kTypeName +
                   ", got " + luaL_typename(L, index),
               kErrorUsage);
  }
  return *static_cast<std::shared_ptr<T>*>(memory);
}

// Null when the value at `index` is not a T.
template <class T>
std::shared_ptr<T> TestHandle(lua_State* L, int index) {
  void* memory = luaL_testudata(L, index, T::kMetatable);
  return memory ? *static_cast<std::shared_ptr<T>*>(memory) : nullptr;
}

template <class T>
int DestroyHandle(lua_State* L) {  // never throws: no Protected needed
  void* memory = luaL_testudata(L, 1, T::kMetatable);
  if (memory != nullptr) static_cast<std::shared_ptr<T>*>(memory)->~shared_ptr<T>();
  return 0;
}

// Creates T's metatable: __index = `methods`, __gc, __name, plus `extra`
// metamethods (e.g. __call, __div, __tostring). The functions must be
// Protected<> ones.
template <class T>
void RegisterType(lua_State* L, const luaL_Reg* methods, const luaL_Reg* extra = nullptr) {
  luaL_newmetatable(L, T::kMetatable);
  lua_pushcfunction(L, DestroyHandle<T>);
  lua_setfield(L, -2, "__gc");
  if (extra != nullptr) luaL_setfuncs(L, extra, 0);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}

// The string at `index`; raises `message` (code 2) when it is not a string,
// or is empty and `non_empty`.
std::string StringArg(lua_State* L, int index, bool non_empty, absl::string_view message);

class OptionTable {
 public:
  // `index`: a table, or nil/none for no options. `what` prefixes errors.
  OptionTable(lua_State* L, int index, std::string what);

  bool has(const char* key);
  double number(const char* key, double fallback);
  std::optional<double> number(const char* key);
  int64_t integer(const char* key, int64_t fallback);
  // integer() for a C++ int: raises when the value is past int's range
  // (instead of wrapping, which turned 2^32 + 5 into 5).
  int int32(const char* key, int fallback);
  bool boolean(const char* key, bool fallback);
  std::string string(const char* key, const std::string& fallback);
  // A list of numbers (e.g. betas); nullopt when absent. Raises when the
  // length is not `n`.
  std::optional<std::vector<double>> numbers(const char* key, size_t n);
  // A list of integers of any length; nullopt when absent. Raises when it is
  // not a list of integers.
  std::optional<std::vector<int64_t>> integers(const char* key);
  // Pushes the value of `key` (nil when absent) and marks it known.
  int push(const char* key);
  // Marks keys as known without reading them (read elsewhere).
  void allow(std::initializer_list<const char*> keys);
  // Raises for keys not asked for, naming the closest known one.
  void finish();

  [[noreturn]] void fail(const char* key, absl::string_view why);
  const std::string& what() const { return what_; }

 private:
  int fetch(const char* key);  // pushes the value; returns its type
  lua_State* L_;
  int index_;
  std::string what_;
  std::set<std::string> known_;
};

// Pushes a Lua table from string -> number pairs.
void PushNumberTable(lua_State* L, const std::vector<std::pair<const char*, double>>& fields);

}  // namespace colossal::lua

#endif  // COLOSSAL_LUA_API_LUA_UTIL_H_
