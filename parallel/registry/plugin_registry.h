// colossal::parallel — the plugins recipes can name.
//
// One line per plugin in plugin_registry.cc maps its recipe name to its
// package's PluginSpec factory; adding a plugin touches its own package and
// that line.
//
//   for (const std::string& name : plugin_names()) ...        // "torch_ddp", "low_level_zero"
//   COLOSSAL_ASSIGN_OR_RETURN(auto spec, make_plugin_spec("low_level_zero", options));
#ifndef COLOSSAL_PARALLEL_REGISTRY_PLUGIN_REGISTRY_H_
#define COLOSSAL_PARALLEL_REGISTRY_PLUGIN_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/registry/plugin_spec.h"

namespace colossal::parallel {

// Reads and validates a plugin's options (errors: option_error naming the key).
using PluginSpecFactory =
    std::function<absl::StatusOr<std::unique_ptr<PluginSpec>>(OptionSource& options)>;

// The registered names, in registration order.
std::vector<std::string> plugin_names();
// The spec of plugin `name` from `options`. NotFound naming the known plugins
// (with the closest one) for an unknown name; the factory's errors.
absl::StatusOr<std::unique_ptr<PluginSpec>> make_plugin_spec(absl::string_view name,
                                                             OptionSource& options);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_REGISTRY_PLUGIN_REGISTRY_H_
