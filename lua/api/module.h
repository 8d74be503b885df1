// colossal::lua — the `colossal` Lua module: what require("colossal") returns.
//
//   colossal.version, colossal.launch{device, seed}, colossal.env()
//   colossal.model.gpt2{...}                         model(batch) -> loss
//   colossal.data.{loader, prepare, default_corpus}
//   colossal.optim.{adamw, hybrid_adam, cpu_adam, sgd}(model, {...})
//   colossal.lr_scheduler.{cosine_annealing_warmup, linear_warmup, constant}(optimizer, {...})
//   colossal.plugin.{torch_ddp, low_level_zero}{...}, colossal.booster{plugin, mixed_precision}
//   colossal.checkpoint.latest(dir)
//   colossal.clock(), colossal.memory(), colossal.device_info(), colossal.jsonl(path)
//   colossal.term.{write, isatty}, colossal.settings(t)
//   colossal.recipe(t[, file])                       the standard loop (lua/lib/recipe.lua)
// Each binding documents itself at the top of its file in lua/api/.
#ifndef COLOSSAL_LUA_API_MODULE_H_
#define COLOSSAL_LUA_API_MODULE_H_

extern "C" {
#include "lua.h"
}

namespace colossal::lua {

inline constexpr char kVersion[] = "0.1.0-dev";

// Pushes the module table (a lua_CFunction for package.preload).
int OpenColossalModule(lua_State* L);

}  // namespace colossal::lua

#endif  // COLOSSAL_LUA_API_MODULE_H_
