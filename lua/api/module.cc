#include "lua/api/module.h"

#include "lua/api/lua_util.h"
#include "lua/api/objects.h"
#include "lua/api/recipe_lua.h"

extern "C" {
#include "lauxlib.h"
}

namespace colossal::lua {

int OpenColossalModule(lua_State* L) {
  lua_newtable(L);
  lua_pushstring(L, kVersion);
  lua_setfield(L, -2, "version");
  OpenUtil(L);
  OpenModel(L);
  lua_setfield(L, -2, "model");
  OpenData(L);
  lua_setfield(L, -2, "data");
  OpenOptim(L);
  lua_setfield(L, -2, "optim");
  OpenScheduler(L);
  lua_setfield(L, -2, "lr_scheduler");
  OpenBooster(L);
  lua_setfield(L, -2, "plugin");
  lua_newtable(L);
  lua_pushcfunction(L, Protected<LatestCheckpoint>);
  lua_setfield(L, -2, "latest");
  lua_setfield(L, -2, "checkpoint");
  // colossal.recipe = (the embedded loop)(colossal).run
  if (luaL_loadbufferx(L, kRecipeLua, sizeof(kRecipeLua) - 1, "=colossal.recipe", "t") != LUA_OK) {
    return lua_error(L);  // a build defect: the embedded source does not compile
  }
  lua_pushvalue(L, -2);
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "run");
  lua_setfield(L, -3, "recipe");
  lua_pop(L, 1);
  return 1;
}

}  // namespace colossal::lua
