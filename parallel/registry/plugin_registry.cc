#include "parallel/registry/plugin_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status/suggest.h"
#include "parallel/ddp/ddp_spec.h"
#include "parallel/gemini/gemini_spec.h"
#include "parallel/hybrid/hybrid_parallel_spec.h"
#include "parallel/zero/low_level_zero_spec.h"

namespace colossal::parallel {
namespace {

struct Registration {
  const char* name;
  PluginSpecFactory factory;
};

const std::vector<Registration>& registry() {
  static const auto* plugins = new std::vector<Registration>{
      {"torch_ddp", make_ddp_spec},
      {"low_level_zero", make_low_level_zero_spec},
      {"gemini", make_gemini_spec},
      {"hybrid_parallel", make_hybrid_parallel_spec},
  };
  return *plugins;
}

}  // namespace

std::vector<std::string> plugin_names() {
  std::vector<std::string> names;
  for (const Registration& r : registry()) names.emplace_back(r.name);
  return names;
}

absl::StatusOr<std::unique_ptr<PluginSpec>> make_plugin_spec(absl::string_view name,
                                                             OptionSource& options) {
  std::vector<absl::string_view> names;
  for (const Registration& r : registry()) {
    if (name == r.name) return r.factory(options);
    names.push_back(r.name);
  }
  return absl::NotFoundError(absl::StrCat("no plugin \"", name, "\"", core::did_you_mean(name, names),
                                          " (plugins: ", absl::StrJoin(names, ", "), ")"));
}

}  // namespace colossal::parallel
