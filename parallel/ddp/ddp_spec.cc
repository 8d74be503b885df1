#include "parallel/ddp/ddp_spec.h"

#include <cmath>
#include <utility>

#include "core/status/status.h"
#include "parallel/ddp/ddp_plugin.h"

namespace colossal::parallel {
namespace {

class DdpSpec : public PluginSpec {
 public:
  explicit DdpSpec(DdpOptions options) : options_(options) {}
  const char* name() const override { return "torch_ddp"; }
  PluginCapabilities capabilities() const override { return {}; }
  absl::StatusOr<std::unique_ptr<Plugin>> make(std::shared_ptr<comm::ProcessGroup> pg,
                                               const PluginEnv&) const override {
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<DdpPlugin> p, DdpPlugin::create(std::move(pg), options_));
    return std::unique_ptr<Plugin>(std::move(p));
  }

 private:
  DdpOptions options_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PluginSpec>> make_ddp_spec(OptionSource& options) {
  DdpOptions o;
  o.bucket_cap_mb = options.number("bucket_cap_mb", o.bucket_cap_mb);
  if (!(o.bucket_cap_mb > 0) || !std::isfinite(o.bucket_cap_mb)) {
    return option_error("bucket_cap_mb", "must be positive");
  }
  return std::unique_ptr<PluginSpec>(std::make_unique<DdpSpec>(o));
}

}  // namespace colossal::parallel
