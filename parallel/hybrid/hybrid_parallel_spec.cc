#include "parallel/hybrid/hybrid_parallel_spec.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "parallel/hybrid/hybrid_parallel_plugin.h"

namespace colossal::parallel {
namespace {

class HybridParallelSpec : public PrecisionOwningSpec {
 public:
  HybridParallelSpec(HybridParallelOptions options, std::string precision, float max_norm,
                     nn::DynamicLossScalerOptions scaler, int64_t num_microbatches,
                     int64_t microbatch_size)
      : PrecisionOwningSpec(std::move(precision), max_norm, scaler),
        options_(std::move(options)),
        num_microbatches_(num_microbatches),
        microbatch_size_(microbatch_size) {}
  const char* name() const override { return "hybrid_parallel"; }
  PluginCapabilities capabilities() const override {
    PluginCapabilities c = owned_precision();
    c.supports_no_sync = options_.zero_stage < 2;
    c.pipeline = options_.pp_size > 1;
    if (options_.num_model_chunks > 1) c.pipeline_micro_batch_multiple = options_.pp_size;
    c.pipeline_num_micro_batches = num_microbatches_;
    c.pipeline_micro_batch_size = microbatch_size_;
    return c;
  }
  absl::StatusOr<std::unique_ptr<Plugin>> make(std::shared_ptr<comm::ProcessGroup> pg,
                                               const PluginEnv& env) const override {
    HybridParallelOptions o = options_;
    o.cpu_offload_threads = std::max(1, env.host_cores / std::max(1, env.local_world_size));
    if (pg->size() % (o.tp_size * o.pp_size * o.sp_size) != 0) {
      // Known only now (the job's size): the message names the option itself.
      return absl::InvalidArgumentError(absl::StrCat(
          "tp_size = ", o.tp_size, o.pp_size > 1 ? absl::StrCat(" x pp_size ", o.pp_size) : "",
          o.sp_size > 1 ? absl::StrCat(" x sp_size ", o.sp_size) : "",
          " does not divide the job's ", pg->size(),
          " process(es); launch a multiple of it (colossal run --nproc_per_node N)"));
    }
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<HybridParallelPlugin> p,
                              HybridParallelPlugin::create(std::move(pg), o));
    return std::unique_ptr<Plugin>(std::move(p));
  }

 private:
  HybridParallelOptions options_;
  int64_t num_microbatches_, microbatch_size_;  // 0: not set
};

}  // namespace

absl::StatusOr<std::unique_ptr<PluginSpec>> make_hybrid_parallel_spec(OptionSource& options) {
  // Every option is read before any is judged: the front end reports keys
  // nobody read as unknown, so an early return would blame the wrong key.
  HybridParallelOptions o;
  const absl::StatusOr<int> tp_size = int_option(options, "tp_size", 1);
  const absl::StatusOr<int> pp_size = int_option(options, "pp_size", 1);
  const std::string pp_style = options.string("pp_style", "1f1b");
  const int64_t num_model_chunks = options.integer("num_model_chunks", 1);
  const int64_t sp_size = options.integer("sp_size", 1);
  o.sequence_parallel = options.boolean("enable_sequence_parallelism", false);
  const std::string sp_mode = options.string("sequence_parallelism_mode", "split_gather");
  const absl::StatusOr<int> zero_stage = int_option(options, "zero_stage", 0);
  const std::string precision = options.string("precision", "fp32");
  const float max_norm = static_cast<float>(options.number("max_norm", 0.0));
  o.zero_bucket_size_in_m = options.number("zero_bucket_size_in_m", 12.0);
  o.ddp_bucket_cap_mb = options.number("ddp_bucket_cap_mb", 25.0);
  o.cpu_offload = options.boolean("cpu_offload", false);
  o.overlap_communication = options.boolean("overlap_communication", true);
  const int64_t num_microbatches = options.integer("num_microbatches", 0);
  const int64_t microbatch_size = options.integer("microbatch_size", 0);
  o.layers_per_stage = options.integers("num_layers_per_stage").value_or(std::vector<int64_t>{});
  const absl::StatusOr<nn::DynamicLossScalerOptions> scaler =
      read_loss_scaler(options, 65536.0);  // Colossal-AI: 2^16
  const bool vocab_multiple = options.has("make_vocab_size_divisible_by");

  COLOSSAL_ASSIGN_OR_RETURN(o.tp_size, tp_size);
  COLOSSAL_ASSIGN_OR_RETURN(o.pp_size, pp_size);
  COLOSSAL_ASSIGN_OR_RETURN(o.zero_stage, zero_stage);
  if (o.tp_size < 1) return option_error("tp_size", "must be at least 1");
  if (o.pp_size < 1) return option_error("pp_size", "must be at least 1");
  if (pp_style != "1f1b" && pp_style != "interleaved") {
    return option_error("pp_style", absl::StrCat("must be \"1f1b\" or \"interleaved\", got \"",
                                                 pp_style, "\""));
  }
  if (pp_style == "interleaved" && o.pp_size < 2) {
    return option_error("pp_style", "= \"interleaved\" needs pp_size > 1");
  }
  if (pp_style == "interleaved" && num_model_chunks < 2) {
    return option_error("num_model_chunks",
                        absl::StrCat("= ", num_model_chunks,
                                     ": pp_style \"interleaved\" needs 2 or more model chunks"));
  }
  if (pp_style == "1f1b" && num_model_chunks != 1) {
    return option_error("num_model_chunks", absl::StrCat("= ", num_model_chunks,
                                                         ": more than 1 needs pp_style = "
                                                         "\"interleaved\" (1f1b runs one)"));
  }
  o.num_model_chunks = static_cast<int>(num_model_chunks);
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"num_microbatches", num_microbatches},
                                   {"microbatch_size", microbatch_size}}) {
    if (value < 0) return option_error(key, absl::StrCat("= ", value, ": must be positive"));
    if (value > 0 && o.pp_size < 2) {
      return option_error(key, absl::StrCat("= ", value, " applies to pipelines (pp_size > 1)"));
    }
  }
  if (!o.layers_per_stage.empty()) {
    const int64_t virtual_stages = int64_t{o.pp_size} * o.num_model_chunks;
    if (o.pp_size < 2) {
      return option_error("num_layers_per_stage", "applies to pipelines (pp_size > 1)");
    }
    if (static_cast<int64_t>(o.layers_per_stage.size()) != virtual_stages) {
      return option_error(
          "num_layers_per_stage",
          absl::StrCat("has ", o.layers_per_stage.size(), " entries; pp_size ", o.pp_size, " x ",
                       o.num_model_chunks, " model chunks take ", virtual_stages,
                       " (one per virtual stage: stage s's chunk c is entry c * pp_size + s)"));
    }
    for (int64_t n : o.layers_per_stage) {
      if (n < 1) {
        return option_error("num_layers_per_stage",
                            absl::StrCat("every stage takes at least one layer, got ", n));
      }
    }
  }
  if (vocab_multiple) {
    return option_error("make_vocab_size_divisible_by",
                        "is not available: the model pads its vocabulary itself "
                        "(model.padded_vocab_multiple, which tp_size must divide)");
  }
  if (o.pp_size > 1 && o.zero_stage > 1) {
    return option_error("zero_stage", absl::StrCat("= ", o.zero_stage, " with pp_size ", o.pp_size,
                                                   ": pipelines take zero_stage 0 or 1"));
  }
  if (sp_mode != "split_gather" && sp_mode != "all_to_all") {
    return option_error("sequence_parallelism_mode",
                        absl::StrCat("= \"", sp_mode,
                                     "\": \"split_gather\" and \"all_to_all\" are built "
                                     "(\"ring\" and \"ring_attn\" are not)"));
  }
  const bool all_to_all = o.sequence_parallel && sp_mode == "all_to_all";
  if (!all_to_all && sp_size != 1) {
    return option_error("sp_size", absl::StrCat("= ", sp_size,
                                                ": only sequence_parallelism_mode "
                                                "\"all_to_all\" (with enable_sequence_"
                                                "parallelism) takes sp_size > 1; split_gather "
                                                "splits the sequence over the tensor-parallel "
                                                "ranks"));
  }
  if (all_to_all) {
    if (sp_size < 2) {
      return option_error("sp_size", absl::StrCat("= ", sp_size,
                                                  ": all_to_all splits the sequence over "
                                                  "sp_size ranks: set it to 2 or more"));
    }
    o.sp_size = static_cast<int>(sp_size);
    o.sequence_parallel = false;  // the split_gather flag
  }
  if (o.sequence_parallel && o.tp_size < 2) {
    return option_error("enable_sequence_parallelism", "needs tp_size > 1 (split_gather)");
  }
  if (o.sequence_parallel && o.zero_stage > 1) {
    return option_error("enable_sequence_parallelism",
                        "(split_gather) works with zero_stage 0 or 1 yet");
  }
  if (o.zero_stage < 0 || o.zero_stage > 2) return option_error("zero_stage", "must be 0, 1 or 2");
  if (precision != "fp32" && precision != "bf16" && precision != "fp16") {
    return option_error("precision", absl::StrCat("must be \"fp32\", \"bf16\" or \"fp16\", got \"",
                                                  precision, "\""));
  }
  if (max_norm < 0) return option_error("max_norm", "must be >= 0 (0: no clipping)");
  if (!(o.zero_bucket_size_in_m > 0))
    return option_error("zero_bucket_size_in_m", "must be positive");
  if (!(o.ddp_bucket_cap_mb > 0)) return option_error("ddp_bucket_cap_mb", "must be positive");
  if (o.cpu_offload && o.zero_stage == 0) {
    return option_error("cpu_offload",
                        "needs zero_stage 1 or 2 (the optimizer state it offloads is ZeRO's)");
  }
  COLOSSAL_ASSIGN_OR_RETURN(const nn::DynamicLossScalerOptions s, scaler);
  return std::unique_ptr<PluginSpec>(
      std::make_unique<HybridParallelSpec>(o, precision, max_norm, s, num_microbatches,
                                           microbatch_size));
}

}  // namespace colossal::parallel
