#include "lua/state.h"

#include <string>

#include "absl/status/status.h"
#include "lua/api/module.h"

extern "C" {
#include "lauxlib.h"
#include "lualib.h"
}

namespace colossal::lua {

absl::StatusOr<LuaState> NewState() {
  LuaState state(luaL_newstate());
  if (!state) return absl::ResourceExhaustedError("cannot allocate a Lua state");
  lua_State* L = state.get();
  const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},          {LUA_LOADLIBNAME, luaopen_package},
                           {LUA_COLIBNAME, luaopen_coroutine}, {LUA_TABLIBNAME, luaopen_table},
                           {LUA_STRLIBNAME, luaopen_string},   {LUA_MATHLIBNAME, luaopen_math},
                           {LUA_UTF8LIBNAME, luaopen_utf8}};
  for (const luaL_Reg& lib : libs) {
    luaL_requiref(L, lib.name, lib.func, 1);
    lua_pop(L, 1);
  }
  // No file access from recipes: not through the base library...
  lua_pushnil(L);
  lua_setglobal(L, "dofile");
  lua_pushnil(L);
  lua_setglobal(L, "loadfile");
  // ...nor through require, which finds only preloaded modules.
  lua_getglobal(L, LUA_LOADLIBNAME);
  lua_pushstring(L, "");
  lua_setfield(L, -2, "path");
  lua_pushstring(L, "");
  lua_setfield(L, -2, "cpath");
  lua_pushnil(L);
  lua_setfield(L, -2, "loadlib");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, OpenColossalModule);
  lua_setfield(L, -2, "colossal");
  lua_pop(L, 2);
  return state;
}

}  // namespace colossal::lua
