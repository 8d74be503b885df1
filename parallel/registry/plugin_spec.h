// colossal::parallel — a plugin as a recipe describes it, before any process
// group exists: its options read and validated, what it can do, and how to
// build it at boost.
//
// Each plugin's package provides a factory from an OptionSource (the recipe's
// table: lua/ adapts its Lua tables, a test can adapt a map) to a PluginSpec;
// parallel/registry/plugin_registry.h lists the factories by the names
// recipes use. The front end never tests plugin names: it asks the spec.
//
//   COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<PluginSpec> spec,
//                             make_plugin_spec("low_level_zero", options));
//   if (spec->capabilities().owns_precision) precision = spec->precision();
//   ...
//   COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Plugin> plugin, spec->make(pg, {.local_world_size = 8}));
#ifndef COLOSSAL_PARALLEL_REGISTRY_PLUGIN_SPEC_H_
#define COLOSSAL_PARALLEL_REGISTRY_PLUGIN_SPEC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "core/status/status.h"
#include "nn/amp/loss_scaler.h"
#include "parallel/booster/plugin.h"

namespace colossal::parallel {

// A plugin's options as the recipe wrote them. Readers return the fallback
// for an absent key; a present value of the wrong type is the source's error
// (lua/ raises one naming the file, line and key).
class OptionSource {
 public:
  virtual ~OptionSource() = default;
  virtual bool has(absl::string_view key) = 0;
  virtual double number(absl::string_view key, double fallback) = 0;
  virtual int64_t integer(absl::string_view key, int64_t fallback) = 0;
  virtual bool boolean(absl::string_view key, bool fallback) = 0;
  virtual std::string string(absl::string_view key, absl::string_view fallback) = 0;
  // A list of integers ({4, 6, 6, 8} in a recipe); nullopt when absent.
  virtual std::optional<std::vector<int64_t>> integers(absl::string_view key) = 0;
};

// options.integer(key) as an int, or an option_error naming the key when the
// value is past int's range (casting would wrap: stage = 2^32 + 1 ran as 1).
absl::StatusOr<int> int_option(OptionSource& options, absl::string_view key, int fallback);

// Specs refuse an option with core::option_error(key, why) ("<key> <why>",
// carrying the key), so the front end points at the recipe line that set it.
using core::option_error;
using core::option_key;

// fp16 loss scaling as Colossal-AI's plugins take it: initial_scale (default
// `initial_scale`, which differs between plugins), min_scale, max_scale,
// growth_factor, backoff_factor, growth_interval, hysteresis (defaults:
// nn::DynamicLossScalerOptions's, Colossal-AI's). Checked whatever the
// precision (an fp32 run of a recipe must not accept what its fp16 run
// refuses): an option_error naming the key, e.g. growth_factor <= 1.
absl::StatusOr<nn::DynamicLossScalerOptions> read_loss_scaler(OptionSource& options,
                                                              double initial_scale);

// What the front end needs to know about a plugin without knowing which it is.
struct PluginCapabilities {
  // The plugin's own `precision` option sets the weights' dtype (Colossal-AI's
  // LowLevelZeroPlugin(precision=...)); else the Booster's mixed_precision does.
  bool owns_precision = false;
  // Booster::no_sync accumulates gradients locally (ZeRO-2 partitions them: no).
  bool supports_no_sync = true;
  // clip_grad_by_value works (a plugin that reduces or shards the gradients
  // inside its own step clips by norm only).
  bool clips_by_value = true;
  // A step's micro-batches run through pipeline stages
  // (booster:execute_pipeline), not one forward and backward at a time.
  bool pipeline = false;
  // The pipeline schedule takes a multiple of this many micro-batches a step
  // (the interleaved schedule: the stage count).
  int pipeline_micro_batch_multiple = 1;
  // Colossal-AI's num_microbatches and microbatch_size when the recipe's
  // plugin set them (0: not set): they must equal the recipe's
  // accumulation_steps and data.micro_batch_size, which feed the pipeline.
  int64_t pipeline_num_micro_batches = 0;
  int64_t pipeline_micro_batch_size = 0;
};

// The environment a plugin is built in, beyond its process group.
struct PluginEnv {
  int local_world_size = 1;  // processes on this host
  int host_cores = 1;        // the host's cores, shared by those processes
};

class PluginSpec {
 public:
  virtual ~PluginSpec() = default;
  // The name recipes use ("torch_ddp", "low_level_zero").
  virtual const char* name() const = 0;
  virtual PluginCapabilities capabilities() const = 0;
  // With owns_precision: "fp32", "bf16" or "fp16".
  virtual std::string precision() const { return "fp32"; }
  // Clipping by global norm the plugin applies in every step (0: none
  // unless the optimizer asks).
  virtual float max_norm() const { return 0.0f; }
  // The fp16 loss scaler's options (Colossal-AI's names and defaults).
  virtual nn::DynamicLossScalerOptions loss_scaler() const { return {}; }
  // Builds the plugin over `pg`. Errors: the plugin's create().
  virtual absl::StatusOr<std::unique_ptr<Plugin>> make(std::shared_ptr<comm::ProcessGroup> pg,
                                                       const PluginEnv& env) const = 0;
};

// A plugin that takes the precision, clipping and loss scaling into its own
// step (Colossal-AI's ZeRO, Gemini and hybrid plugins): it keeps the three
// from its options. capabilities() starts from owned_precision().
class PrecisionOwningSpec : public PluginSpec {
 public:
  PrecisionOwningSpec(std::string precision, float max_norm, nn::DynamicLossScalerOptions scaler)
      : precision_(std::move(precision)), max_norm_(max_norm), scaler_(scaler) {}
  std::string precision() const override { return precision_; }
  float max_norm() const override { return max_norm_; }
  nn::DynamicLossScalerOptions loss_scaler() const override { return scaler_; }

 protected:
  // owns_precision, and clipping by norm only (the step reduces the gradients).
  static PluginCapabilities owned_precision() {
    PluginCapabilities c;
    c.owns_precision = true;
    c.clips_by_value = false;
    return c;
  }

 private:
  std::string precision_;
  float max_norm_;
  nn::DynamicLossScalerOptions scaler_;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_REGISTRY_PLUGIN_SPEC_H_
