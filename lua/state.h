// colossal::lua — the embedded Lua 5.4 interpreter and the `colossal` module.
//
// NewState() makes a sandboxed interpreter for recipes: only the base,
// package, coroutine, string, table, math and utf8 libraries are open (no io,
// os or debug); dofile and loadfile are removed; `require` finds nothing on
// disk (package.path and cpath are empty) but the preloaded `colossal` module:
//
//   local colossal = require("colossal")
//   colossal.version        -- "0.1.0-dev"
//   colossal.env()          -- {rank=0, world_size=1, local_rank=0, device="cpu"}
//
// env() reads torchrun/Slurm/Open MPI variables (comm/launch/env.h); device is
// "cuda:<local_rank>" when this build and machine have a CUDA device, else
// "cpu". A malformed environment raises a Lua error naming the variable.
//
//   COLOSSAL_ASSIGN_OR_RETURN(LuaState L, NewState());
//   luaL_dostring(L.get(), "return require('colossal').version");
#ifndef COLOSSAL_LUA_STATE_H_
#define COLOSSAL_LUA_STATE_H_

#include <memory>

#include "absl/status/statusor.h"

extern "C" {
#include "lua.h"
}

namespace colossal::lua {

inline constexpr char kVersion[] = "0.1.0-dev";

struct LuaStateCloser {
  void operator()(lua_State* L) const { lua_close(L); }
};
using LuaState = std::unique_ptr<lua_State, LuaStateCloser>;

// A fresh sandboxed interpreter with `colossal` in package.preload.
// ResourceExhaustedError when Lua cannot allocate its state.
absl::StatusOr<LuaState> NewState();

// Pushes the `colossal` module table (what require("colossal") returns).
int OpenColossalModule(lua_State* L);

}  // namespace colossal::lua

#endif  // COLOSSAL_LUA_STATE_H_
