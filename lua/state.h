// colossal::lua — the embedded Lua 5.4 interpreter and the `colossal` module.
//
// NewState() makes a sandboxed interpreter for recipes: only the base,
// package, coroutine, string, table, math and utf8 libraries are open (no io,
// os or debug); dofile and loadfile are removed; `require` finds nothing on
// disk (package.path and cpath are empty) but the preloaded `colossal` module
// (lua/api/module.h). Recipes reach files only through the module.
//
//   COLOSSAL_ASSIGN_OR_RETURN(LuaState L, NewState());
//   luaL_dostring(L.get(), "return require('colossal').version");
#ifndef COLOSSAL_LUA_STATE_H_
#define COLOSSAL_LUA_STATE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "lua/api/module.h"  // kVersion, OpenColossalModule

extern "C" {
#include "lua.h"
}

namespace colossal::lua {

struct LuaStateCloser {
  void operator()(lua_State* L) const { lua_close(L); }
};
using LuaState = std::unique_ptr<lua_State, LuaStateCloser>;

// A fresh sandboxed interpreter with `colossal` in package.preload.
// ResourceExhaustedError when Lua cannot allocate its state.
absl::StatusOr<LuaState> NewState();

}  // namespace colossal::lua

#endif  // COLOSSAL_LUA_STATE_H_
