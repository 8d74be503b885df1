// Acceptance (io issue): a run resumed from a checkpoint continues exactly as
// the run that never stopped. A tiny GPT-2 trains on the CPU (fp32) for 12
// steps with AdamW (two decay groups), a warmup + cosine schedule, clipping by
// global norm and 2 micro-batches per step, fed by a shuffling DataLoader
// (prefetch thread on) over two token shards written here. Then the same run
// stops after 5 steps, saves a checkpoint (model, optimizer, trainer state:
// scheduler, RNG, loader), everything is destroyed, fresh objects are built
// (model initialised with another seed, context with another seed) and loaded
// from the checkpoint, and the run continues for 7 steps. Losses, final
// weights, final optimizer state, RNG state and loader state must be
// bit-identical to the straight run.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"
#include "io/checkpoint/checkpoint.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/models/gpt2/hugging_face.h"
#include "nn/train/checkpoint.h"
#include "io/loader/data_loader.h"
#include "io/shards/token_shard.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/optim/adam.h"
#include "nn/optim/module_params.h"
#include "nn/optim/param.h"
#include "nn/optim/state_dict.h"
#include "nn/schedule/lr_schedule.h"
#include "nn/train/train_step.h"

namespace colossal {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;

constexpr int kSteps = 12;        // N
constexpr int kResumeAfter = 5;   // k
constexpr int kMicroBatches = 2;
constexpr int64_t kB = 2;         // rows per micro-batch
constexpr int64_t kT = 8;
constexpr uint64_t kRngPerStep = 4096;  // what a dropout would reserve per step

nn::GPT2Config Config() {
  nn::GPT2Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 50;  // padded to 56: wte has padding rows
  c.max_seq_len = kT;
  c.padded_vocab_multiple = 8;
  return c;
}

// Two shards of random tokens (fixed seed): 14 + 9 = 23 windows of T + 1,
// 11 batches of 2 rows per epoch, so 24 batches span 3 epochs and the
// checkpoint (after 10 batches) falls inside epoch 0.
std::string WriteShards(const std::string& dir) {
  std::mt19937 gen(20240520);
  std::uniform_int_distribution<int> tok(0, static_cast<int>(Config().vocab_size) - 1);
  const int64_t sizes[] = {14 * kT + 1, 9 * kT + 4};
  for (int s = 0; s < 2; ++s) {
    std::vector<uint16_t> ids(sizes[s]);
    for (auto& v : ids) v = static_cast<uint16_t>(tok(gen));
    absl::StatusOr<io::TokenShardWriter> w = io::TokenShardWriter::Create(dir + "/train_00000" + std::to_string(s) + ".bin");
    EXPECT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(w->Append(std::span<const uint16_t>(ids)).ok());
    EXPECT_TRUE(w->Finish().ok());
  }
  return dir + "/train_*.bin";
}

io::DataLoaderOptions LoaderOptions(const std::string& pattern) {
  io::DataLoaderOptions o;
  o.pattern = pattern;
  o.batch_size = kB;
  o.seq_len = kT;
  o.seed = 1337;
  o.shuffle = true;
  o.prefetch_depth = 2;
  return o;
}

nn::LrScheduleOptions Schedule() {
  nn::LrScheduleOptions s;
  s.kind = nn::LrScheduleKind::kCosine;
  s.warmup_steps = 3;
  s.total_steps = kSteps;
  s.eta_min = 1e-3;
  return s;
}

std::vector<float> Floats(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Everything a training run holds; destroyed as a whole.
struct Run {
  std::unique_ptr<core::Context> ctx;
  std::unique_ptr<nn::GPT2> model;
  std::unique_ptr<nn::Adam> opt;
  std::optional<nn::LrScheduler> sched;
  std::unique_ptr<io::DataLoader> loader;

  // Fresh objects, configured as the run was started (model_seed/ctx_seed
  // differ between the straight run and the resumed one on purpose).
  static std::unique_ptr<Run> Create(const std::string& pattern, uint64_t model_seed, uint64_t ctx_seed) {
    auto r = std::make_unique<Run>();
    core::ContextOptions co;
    co.seed = ctx_seed;
    auto ctx = core::Context::create(core::Device::cpu(), co);
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    r->ctx = *std::move(ctx);
    auto model = nn::GPT2::create(Config(), DType::kF32, Stream::cpu());
    EXPECT_TRUE(model.ok()) << model.status();
    r->model = *std::move(model);
    EXPECT_TRUE(r->model->init(model_seed).ok());
    auto params = nn::optimizer_params(r->model->store().parameters(), Stream::cpu());
    EXPECT_TRUE(params.ok()) << params.status();
    nn::AdamOptions ao = nn::AdamOptions::adamw_defaults();
    ao.lr = 1e-2;
    ao.beta2 = 0.95;
    auto opt = nn::make_adamw(nn::split_decay_groups(*std::move(params), 0.1), ao);
    EXPECT_TRUE(opt.ok()) << opt.status();
    r->opt = *std::move(opt);
    EXPECT_EQ(r->opt->num_groups(), 2);
    auto sched = nn::LrScheduler::create(Schedule(), r->opt->lrs());  // base lrs, before any load
    EXPECT_TRUE(sched.ok()) << sched.status();
    r->sched.emplace(*std::move(sched));
    auto loader = io::DataLoader::Open(LoaderOptions(pattern));
    EXPECT_TRUE(loader.ok()) << loader.status();
    r->loader = *std::move(loader);
    EXPECT_EQ(r->loader->batches_per_epoch(), 11);
    return r;
  }

  // One optimizer step; returns the loss.
  float Step() {
    EXPECT_TRUE(opt->set_lrs(sched->lrs()).ok());
    std::vector<nn::MicroBatch> mbs;
    for (int i = 0; i < kMicroBatches; ++i) {
      absl::StatusOr<io::Batch> b = loader->next_batch();
      EXPECT_TRUE(b.ok()) << b.status();
      mbs.push_back({b->inputs, b->targets, nullptr});
    }
    nn::TrainStepOptions o;
    o.max_norm = 1.0f;
    absl::StatusOr<nn::TrainStepResult> r = nn::train_step(*ctx, *model, *opt, Config().vocab_size, mbs, o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return 0.0f;
    if (r->step.clip_coef < 1.0f) ++clipped_steps;
    sched->step();
    ctx->next_offset(kRngPerStep);  // stands in for dropout's random numbers
    return r->loss;
  }

  std::map<std::string, std::vector<float>> OptimizerFloats() const {
    std::map<std::string, std::vector<float>> out;
    absl::StatusOr<nn::OptimizerStateDict> sd = opt->state_dict();
    EXPECT_TRUE(sd.ok()) << sd.status();
    for (const auto& [name, t] : sd->tensors) {
      if (t.dtype() == DType::kF32) {
        out[name] = Floats(t);
      } else if (t.dtype() == DType::kI64) {
        out[name] = {static_cast<float>(*t.data<int64_t>())};
      }
    }
    return out;
  }

  int clipped_steps = 0;
};

TEST(ExactResumeTest, ResumedRunIsBitIdenticalToStraightRun) {
  const std::string tmp = ::testing::TempDir();
  const std::string data_dir = tmp + "/resume_data";
  ASSERT_EQ(::mkdir(data_dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  const std::string pattern = WriteShards(data_dir);
  const std::string root = tmp + "/resume_ckpt";

  // ---- straight run ----
  std::vector<float> straight_losses;
  std::vector<float> straight_weights;
  std::map<std::string, std::vector<float>> straight_opt;
  core::RngState straight_rng;
  io::DataLoaderState straight_loader;
  {
    auto run = Run::Create(pattern, /*model_seed=*/42, /*ctx_seed=*/7);
    for (int s = 0; s < kSteps; ++s) straight_losses.push_back(run->Step());
    straight_weights = Floats(run->model->store().flat_values(DType::kF32));
    straight_opt = run->OptimizerFloats();
    straight_rng = run->ctx->rng_state();
    straight_loader = run->loader->state();
    EXPECT_GT(run->clipped_steps, 0) << "clipping never active; raise the lr or lower max_norm";
  }
  ASSERT_EQ(straight_losses.size(), static_cast<size_t>(kSteps));
  EXPECT_NE(straight_losses.front(), straight_losses.back());

  // ---- first part of the resumed run: k steps, save, destroy ----
  std::vector<float> resumed_losses;
  {
    auto run = Run::Create(pattern, 42, 7);
    for (int s = 0; s < kResumeAfter; ++s) resumed_losses.push_back(run->Step());
    absl::StatusOr<nn::OptimizerStateDict> sd = run->opt->state_dict();
    ASSERT_TRUE(sd.ok()) << sd.status();
    nn::CheckpointToSave save;
    save.step = kResumeAfter;
    save.architecture = run->model.get();
    save.model = &run->model->store();
    save.optimizer = &*sd;
    save.trainer.lr_scheduler = run->sched->state();
    save.trainer.rng = run->ctx->rng_state();
    save.trainer.data_loader = run->loader->state();
    EXPECT_EQ(save.trainer.data_loader->epoch, 0);
    EXPECT_EQ(save.trainer.data_loader->batch, kResumeAfter * kMicroBatches);
    absl::StatusOr<std::string> dir = nn::SaveCheckpoint(root, save);
    ASSERT_TRUE(dir.ok()) << dir.status();
  }

  // ---- fresh objects, load, continue ----
  {
    auto run = Run::Create(pattern, /*model_seed=*/999, /*ctx_seed=*/12345);
    absl::StatusOr<std::string> dir = io::ResolveCheckpoint(root);
    ASSERT_TRUE(dir.ok()) << dir.status();
    absl::StatusOr<nn::GPT2Config> config = nn::ReadGPT2Config(*dir);
    ASSERT_TRUE(config.ok()) << config.status();
    ASSERT_TRUE(nn::LoadHuggingFaceModel(*dir, *run->model, run->model->store()).ok());
    absl::StatusOr<nn::OptimizerStateDict> sd = nn::LoadOptimizerState(*dir);
    ASSERT_TRUE(sd.ok()) << sd.status();
    ASSERT_TRUE(run->opt->load_state_dict(*sd).ok());
    absl::StatusOr<nn::TrainerState> ts = nn::LoadTrainerState(*dir);
    ASSERT_TRUE(ts.ok()) << ts.status();
    EXPECT_EQ(ts->step, kResumeAfter);
    ASSERT_TRUE(ts->lr_scheduler && ts->rng && ts->data_loader);
    ASSERT_TRUE(run->sched->load_state(*ts->lr_scheduler).ok());
    run->ctx->set_rng_state(*ts->rng);
    ASSERT_TRUE(run->loader->set_state(*ts->data_loader).ok());
    for (int s = kResumeAfter; s < kSteps; ++s) resumed_losses.push_back(run->Step());

    const std::vector<float> weights = Floats(run->model->store().flat_values(DType::kF32));
    EXPECT_TRUE(BitEqual(weights, straight_weights)) << "final weights differ";
    const auto opt_state = run->OptimizerFloats();
    ASSERT_EQ(opt_state.size(), straight_opt.size());
    for (const auto& [name, v] : straight_opt) {
      ASSERT_TRUE(opt_state.count(name)) << name;
      EXPECT_TRUE(BitEqual(opt_state.at(name), v)) << "optimizer state differs: " << name;
    }
    EXPECT_EQ(run->ctx->rng_state(), straight_rng);
    EXPECT_EQ(run->loader->state(), straight_loader);
  }

  ASSERT_EQ(resumed_losses.size(), straight_losses.size());
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(std::memcmp(&resumed_losses[s], &straight_losses[s], sizeof(float)), 0)
        << "step " << s << ": resumed loss " << resumed_losses[s] << " vs straight " << straight_losses[s];
  }
}

}  // namespace
}  // namespace colossal
