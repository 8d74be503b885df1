// colossal::lua — the `colossal` Lua module: what require("colossal") returns.
//
//   colossal.version, colossal.launch{device, seed}, colossal.env()
//   colossal.model.{gpt2, llama}{...}                model(batch) -> loss
//   colossal.data.{loader, prepare, default_corpus}
//   colossal.optim.{adamw, hybrid_adam, cpu_adam, sgd}(model, {...})
//   colossal.lr_scheduler.{cosine_annealing_warmup, linear_warmup, constant}(optimizer, {...})
//   colossal.plugin.{torch_ddp, low_level_zero, gemini, hybrid_parallel}{...}
//                                                    (parallel/registry/plugin_registry.cc)
//   colossal.booster{plugin, mixed_precision}
//   colossal.checkpoint.latest(dir)
//   colossal.clock(), colossal.memory(), colossal.reset_peak_memory(), colossal.device_info()
//   colossal.trace_start(), colossal.trace_stop(file), colossal.jsonl(path)
//   colossal.term.{write, isatty}, colossal.settings(t)
//   colossal.recipe(t[, file])                       the standard loop (lua/lib/recipe.lua)
// colossal._key_line is the recipe loop's helper for error lines, not an API.
// The bindings and the methods of the objects they return (model:generate,
// booster:save_checkpoint, ...) are documented in their files in lua/api/.
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
