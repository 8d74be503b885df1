// The registry: names, unknown names, option validation that names the key,
// capabilities, and building a plugin from its spec.
#include "parallel/registry/plugin_registry.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace colossal::parallel {
namespace {

// Options from a map of strings (numbers parsed, "true"/"false" booleans).
class MapOptions : public OptionSource {
 public:
  explicit MapOptions(std::map<std::string, std::string> values) : values_(std::move(values)) {}
  bool has(absl::string_view key) override {
    read_.insert(std::string(key));
    return values_.count(std::string(key)) > 0;
  }
  double number(absl::string_view key, double fallback) override {
    return has(key) ? std::stod(values_.at(std::string(key))) : fallback;
  }
  int64_t integer(absl::string_view key, int64_t fallback) override {
    return has(key) ? std::stoll(values_.at(std::string(key))) : fallback;
  }
  bool boolean(absl::string_view key, bool fallback) override {
    return has(key) ? values_.at(std::string(key)) == "true" : fallback;
  }
  std::string string(absl::string_view key, absl::string_view fallback) override {
    return has(key) ? values_.at(std::string(key)) : std::string(fallback);
  }
  // "4,6,6,8".
  std::optional<std::vector<int64_t>> integers(absl::string_view key) override {
    if (!has(key)) return std::nullopt;
    std::vector<int64_t> out;
    for (absl::string_view v : absl::StrSplit(values_.at(std::string(key)), ',')) {
      out.push_back(std::stoll(std::string(v)));
    }
    return out;
  }

  // The keys asked for (every reader asks has() first).
  const std::set<std::string>& read() const { return read_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> read_;
};

// `plugin` refuses `values`, naming `key`, after reading every option it
// reads when given none: the Lua front end reports the keys nobody read as
// unknown, so a spec that returned before reading them would have blamed an
// innocent key (precision = "fp8" was reported as "unknown option 'max_norm'").
void expect_bad_option(const std::string& plugin, const std::map<std::string, std::string>& values,
                       const std::string& key) {
  MapOptions none({});
  ASSERT_TRUE(make_plugin_spec(plugin, none).ok()) << plugin;
  MapOptions o(values);
  absl::StatusOr<std::unique_ptr<PluginSpec>> s = make_plugin_spec(plugin, o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << plugin << " " << key;
  EXPECT_EQ(option_key(s.status()), std::optional<std::string>(key)) << s.status();
  for (const std::string& k : none.read()) {
    EXPECT_EQ(o.read().count(k), 1u) << plugin << ": refusing " << key << " left " << k << " unread";
  }
}

TEST(PluginRegistry, NamesAndUnknownNames) {
  EXPECT_EQ(plugin_names(), (std::vector<std::string>{"torch_ddp", "low_level_zero", "gemini", "hybrid_parallel"}));
  MapOptions none({});
  absl::StatusOr<std::unique_ptr<PluginSpec>> s = make_plugin_spec("low_level_zeros", none);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "did you mean \"low_level_zero\"")) << s.status();
}

TEST(PluginRegistry, CapabilitiesComeFromTheOptions) {
  MapOptions none({});
  auto ddp = make_plugin_spec("torch_ddp", none);
  ASSERT_TRUE(ddp.ok()) << ddp.status();
  EXPECT_FALSE((*ddp)->capabilities().owns_precision);
  EXPECT_TRUE((*ddp)->capabilities().supports_no_sync);
  EXPECT_TRUE((*ddp)->capabilities().clips_by_value);
  MapOptions zero2({{"stage", "2"}, {"precision", "bf16"}, {"max_norm", "1.5"}, {"initial_scale", "1024"}});
  auto zero = make_plugin_spec("low_level_zero", zero2);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_TRUE((*zero)->capabilities().owns_precision);
  EXPECT_FALSE((*zero)->capabilities().supports_no_sync);
  EXPECT_FALSE((*zero)->capabilities().clips_by_value);
  EXPECT_EQ((*zero)->precision(), "bf16");
  EXPECT_EQ((*zero)->max_norm(), 1.5f);
  EXPECT_EQ((*zero)->loss_scaler().initial_scale, 1024.0);
  MapOptions zero1(std::map<std::string, std::string>{{"stage", "1"}});
  EXPECT_TRUE((*make_plugin_spec("low_level_zero", zero1))->capabilities().supports_no_sync);
}

TEST(PluginRegistry, GeminiTakesBothVocabularies) {
  MapOptions newer({{"placement_policy", "auto"}, {"search_range_m", "16"}, {"max_norm", "1"}});
  auto g = make_plugin_spec("gemini", newer);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE((*g)->capabilities().owns_precision);
  EXPECT_TRUE((*g)->capabilities().supports_no_sync);
  EXPECT_FALSE((*g)->capabilities().clips_by_value);
  EXPECT_EQ((*g)->max_norm(), 1.0f);
  EXPECT_EQ((*g)->loss_scaler().initial_scale, 65536.0);  // GeminiPlugin's 2^16
  MapOptions older({{"placement_policy", "cpu"}, {"chunk_search_range", "67108864"},
                    {"chunk_search_n_grids", "4096"}, {"min_chunk_size", "1048576"},
                    {"enable_distributed_storage", "true"}, {"force_outputs_fp32", "false"}});
  EXPECT_TRUE(make_plugin_spec("gemini", older).ok());
  const std::pair<std::map<std::string, std::string>, const char*> cases[] = {
      {{{"placement_policy", "gpu"}}, "placement_policy"},
      {{{"offload_optim_frac", "1.5"}}, "offload_optim_frac"},
      {{{"offload_param_frac", "0.5"}}, "offload_param_frac"},
      {{{"search_range_m", "1"}, {"chunk_search_range", "1"}}, "chunk_search_range"},
      {{{"use_chunk", "false"}}, "use_chunk"},
      {{{"master_weights", "false"}}, "master_weights"},
      {{{"chunk_size", "0"}}, "chunk_size"},
      {{{"gpu_margin_mem_ratio", "0.5"}}, "gpu_margin_mem_ratio"},
      {{{"force_outputs_fp32", "true"}}, "force_outputs_fp32"},
      {{{"chunk_search_n_grids", "0"}}, "chunk_search_n_grids"},
      {{{"hidden_dim", "64"}, {"chunk_search_n_grids", "8"}}, "chunk_search_n_grids"},
      {{{"precision", "fp8"}}, "precision"},
  };
  for (const auto& [values, key] : cases) expect_bad_option("gemini", values, key);
}

TEST(PluginRegistry, HybridParallelTakesColossalAIsNames) {
  MapOptions tp2({{"tp_size", "2"}, {"zero_stage", "1"}, {"precision", "bf16"}, {"max_norm", "1"}});
  auto h = make_plugin_spec("hybrid_parallel", tp2);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE((*h)->capabilities().owns_precision);
  EXPECT_TRUE((*h)->capabilities().supports_no_sync);
  EXPECT_FALSE((*h)->capabilities().clips_by_value);
  EXPECT_EQ((*h)->precision(), "bf16");
  EXPECT_EQ((*h)->loss_scaler().initial_scale, 65536.0);  // HybridParallelPlugin's 2^16
  EXPECT_FALSE((*h)->capabilities().pipeline);
  MapOptions zero2(std::map<std::string, std::string>{{"zero_stage", "2"}});
  EXPECT_FALSE((*make_plugin_spec("hybrid_parallel", zero2))->capabilities().supports_no_sync);
  MapOptions sp({{"tp_size", "2"}, {"enable_sequence_parallelism", "true"}});
  EXPECT_TRUE(make_plugin_spec("hybrid_parallel", sp).ok());
  MapOptions pp2({{"pp_size", "2"}, {"zero_stage", "1"}});
  EXPECT_TRUE((*make_plugin_spec("hybrid_parallel", pp2))->capabilities().pipeline);
  EXPECT_EQ((*make_plugin_spec("hybrid_parallel", pp2))->capabilities().pipeline_micro_batch_multiple,
            1);
  MapOptions interleaved(
      {{"pp_size", "2"}, {"pp_style", "interleaved"}, {"num_model_chunks", "2"}});
  EXPECT_EQ(
      (*make_plugin_spec("hybrid_parallel", interleaved))->capabilities().pipeline_micro_batch_multiple,
      2);
  MapOptions ulysses({{"enable_sequence_parallelism", "true"},
                      {"sequence_parallelism_mode", "all_to_all"},
                      {"sp_size", "2"},
                      {"zero_stage", "2"}});
  absl::StatusOr<std::unique_ptr<PluginSpec>> u = make_plugin_spec("hybrid_parallel", ulysses);
  ASSERT_TRUE(u.ok()) << u.status();
  // all_to_all composes with tensor and pipeline parallelism, split_gather
  // with pipelines.
  MapOptions ulysses_tp_pp({{"enable_sequence_parallelism", "true"},
                            {"sequence_parallelism_mode", "all_to_all"},
                            {"sp_size", "2"},
                            {"tp_size", "2"},
                            {"pp_size", "2"}});
  EXPECT_TRUE(make_plugin_spec("hybrid_parallel", ulysses_tp_pp).ok());
  MapOptions split_gather_pp(
      {{"enable_sequence_parallelism", "true"}, {"tp_size", "2"}, {"pp_size", "2"}});
  EXPECT_TRUE(make_plugin_spec("hybrid_parallel", split_gather_pp).ok());
  // num_microbatches and microbatch_size reach the front end, which checks
  // them against the recipe; num_layers_per_stage sizes each virtual stage.
  MapOptions sized({{"pp_size", "2"},
                    {"pp_style", "interleaved"},
                    {"num_model_chunks", "2"},
                    {"num_microbatches", "8"},
                    {"microbatch_size", "2"},
                    {"num_layers_per_stage", "1,3,3,1"}});
  absl::StatusOr<std::unique_ptr<PluginSpec>> z = make_plugin_spec("hybrid_parallel", sized);
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ((*z)->capabilities().pipeline_num_micro_batches, 8);
  EXPECT_EQ((*z)->capabilities().pipeline_micro_batch_size, 2);
  EXPECT_EQ((*make_plugin_spec("hybrid_parallel", pp2))->capabilities().pipeline_num_micro_batches,
            0);
  // What is not built yet, or makes no sense, names its key.
  const std::pair<std::map<std::string, std::string>, const char*> cases[] = {
      {{{"pp_size", "2"}, {"zero_stage", "2"}}, "zero_stage"},
      {{{"pp_size", "0"}}, "pp_size"},
      {{{"sp_size", "2"}}, "sp_size"},
      {{{"enable_sequence_parallelism", "true"}}, "enable_sequence_parallelism"},  // tp_size 1
      {{{"enable_sequence_parallelism", "true"}, {"tp_size", "2"}, {"zero_stage", "2"}},
       "enable_sequence_parallelism"},
      {{{"sequence_parallelism_mode", "ring"}}, "sequence_parallelism_mode"},
      {{{"enable_sequence_parallelism", "true"}, {"sequence_parallelism_mode", "all_to_all"}},
       "sp_size"},  // sp_size 1
      {{{"pp_style", "zigzag"}}, "pp_style"},
      {{{"pp_style", "interleaved"}, {"num_model_chunks", "2"}}, "pp_style"},  // pp_size 1
      {{{"pp_size", "2"}, {"pp_style", "interleaved"}}, "num_model_chunks"},
      {{{"pp_size", "2"}, {"num_model_chunks", "2"}}, "num_model_chunks"},  // 1f1b
      {{{"tp_size", "0"}}, "tp_size"},
      {{{"zero_stage", "3"}}, "zero_stage"},
      {{{"cpu_offload", "true"}}, "cpu_offload"},
      {{{"num_microbatches", "4"}}, "num_microbatches"},  // pp_size 1
      {{{"pp_size", "2"}, {"microbatch_size", "-1"}}, "microbatch_size"},
      {{{"pp_size", "2"}, {"num_layers_per_stage", "1,1,2"}}, "num_layers_per_stage"},
      {{{"pp_size", "2"}, {"num_layers_per_stage", "0,4"}}, "num_layers_per_stage"},
      {{{"num_layers_per_stage", "2,2"}}, "num_layers_per_stage"},  // pp_size 1
      {{{"make_vocab_size_divisible_by", "64"}}, "make_vocab_size_divisible_by"},
      {{{"tp_size", "4294967298"}}, "tp_size"},  // past int: would wrap to 2
      {{{"precision", "fp8"}}, "precision"},
  };
  for (const auto& [values, key] : cases) expect_bad_option("hybrid_parallel", values, key);
}

TEST(PluginRegistry, BadOptionsNameTheirKey) {
  const std::pair<std::map<std::string, std::string>, const char*> cases[] = {
      {{{"stage", "3"}}, "stage"},
      {{{"precision", "fp8"}}, "precision"},
      {{{"max_norm", "-1"}}, "max_norm"},
      {{{"reduce_bucket_size_in_m", "0"}}, "reduce_bucket_size_in_m"},
      {{{"communication_dtype", "fp8"}}, "communication_dtype"},
      {{{"stage", "4294967298"}}, "stage"},  // past int: would wrap to 2
  };
  for (const auto& [values, key] : cases) expect_bad_option("low_level_zero", values, key);
  // Colossal-AI's overlap_communication = false is taken (buckets reduced
  // after the backward), by both plugins that reduce buckets over dp.
  // communication_dtype other than the precision: gradients reduced in it.
  MapOptions bf16_wire(std::map<std::string, std::string>{{"communication_dtype", "bf16"}});
  EXPECT_TRUE(make_plugin_spec("low_level_zero", bf16_wire).ok());
  MapOptions no_overlap(std::map<std::string, std::string>{{"overlap_communication", "false"}});
  EXPECT_TRUE(make_plugin_spec("low_level_zero", no_overlap).ok());
  MapOptions hybrid_no_overlap(std::map<std::string, std::string>{{"overlap_communication", "false"}});
  EXPECT_TRUE(make_plugin_spec("hybrid_parallel", hybrid_no_overlap).ok());
  expect_bad_option("torch_ddp", {{"bucket_cap_mb", "0"}}, "bucket_cap_mb");
  // fp16 loss scaling is checked at any precision: the same recipe must not
  // pass on the CPU (fp32) and fail on a GPU (fp16).
  for (const char* plugin : {"low_level_zero", "gemini", "hybrid_parallel"}) {
    const std::pair<std::map<std::string, std::string>, const char*> scaler_cases[] = {
        {{{"initial_scale", "-7"}}, "initial_scale"},
        {{{"growth_factor", "1"}}, "growth_factor"},
        {{{"backoff_factor", "0"}}, "backoff_factor"},
        {{{"growth_interval", "0"}}, "growth_interval"},
        {{{"hysteresis", "-1"}}, "hysteresis"},
        {{{"min_scale", "4"}, {"max_scale", "2"}}, "min_scale"},
    };
    for (const auto& [values, key] : scaler_cases) expect_bad_option(plugin, values, key);
  }
  EXPECT_EQ(option_key(absl::InvalidArgumentError("x")), std::nullopt);
}

}  // namespace
}  // namespace colossal::parallel
