// A run's checkpoint through the Booster on 2 ranks (ddp over the builtin
// group, threads): rank 0 writes, both resume to the same weights, optimizer
// state, LR schedule and RNG; and one process without a booster.
#include "parallel/checkpoint/run_checkpoint.h"

#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "comm/store/tcp_store.h"
#include "gtest/gtest.h"
#include "nn/layers/cross_entropy.h"
#include "nn/train/checkpoint.h"
#include "parallel/ddp/ddp_plugin.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/gemini/gemini_test_util.h"
#include "parallel/hybrid/hybrid_test_util.h"
#include "parallel/zero/low_level_zero_plugin.h"
#include "parallel/zero/zero_test_util.h"

namespace colossal::parallel {
namespace {

using testing::floats_of;

// A fresh folder under TEST_TMPDIR (Bazel), or a new one under /tmp (a bundle run).
std::string TestDir(const std::string& name) {
  if (const char* base = std::getenv("TEST_TMPDIR")) return std::string(base) + "/" + name;
  char pattern[] = "/tmp/run_checkpoint_test.XXXXXX";
  const char* dir = ::mkdtemp(pattern);
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// `model` trained `steps` steps of SGD (momentum: state to save) on a fixed batch.
void train(core::Context& ctx, Booster* booster, nn::GPT2& model, nn::Optimizer& opt, int steps) {
  for (int s = 0; s < steps; ++s) {
    ASSERT_TRUE(opt.zero_grad().ok());
    if (booster != nullptr) {
      testing::booster_micro_step(ctx, *booster, model, testing::micro_batch(s, 0, 0), 1.0f);
      ASSERT_TRUE(booster->step().ok());
    } else {
      absl::StatusOr<nn::ForwardResult> out = model.forward(ctx, testing::micro_batch(s, 0, 0).tokens);
      ASSERT_TRUE(out.ok());
      absl::StatusOr<nn::CrossEntropyResult> ce =
          nn::cross_entropy(ctx, out->output, testing::micro_batch(s, 0, 0).targets,
                            model.config().vocab_size, {});
      ASSERT_TRUE(ce.ok());
      ASSERT_TRUE(model.backward(ctx, *out->saved, ce->dlogits).ok());
      ASSERT_TRUE(opt.step().ok());
    }
  }
}

// `steps` steps of `booster` on this rank's batches from step `first` on.
void train_boosted(core::Context& ctx, Booster& booster, nn::CausalLM& model, int rank, int first, int steps) {
  for (int s = first; s < first + steps; ++s) {
    ASSERT_TRUE(booster.zero_grad().ok());
    testing::booster_micro_step(ctx, booster, model, testing::micro_batch(s, rank, 0), 1.0f);
    ASSERT_TRUE(booster.step().ok());
  }
}

// The parts of a boosted run on `rank` of `pg`: model, optimizer, booster, stream.
RunParts boosted_parts(nn::CausalLM& model, nn::Optimizer& optimizer, Booster& booster,
                       comm::ProcessGroup& pg, core::Context& ctx) {
  RunParts run;
  run.architecture = &model;
  run.model = &model.store();
  run.optimizer = &optimizer;
  run.booster = &booster;
  run.group = &pg;
  run.rank = pg.rank();
  run.stream = &ctx.compute_stream();
  return run;
}

// The step-3 checkpoint `dir` that `run` saved holds what the booster's state
// dicts hold: its model read back into `whole` (the whole model, declared)
// and its optimizer files. After `train_on` moves the run on, a resume from
// the files restores both on this rank.
void expect_files_hold_and_resume(const std::string& dir, const RunParts& run, Booster& booster,
                                  nn::CausalLM& whole, const std::function<void()>& train_on) {
  const auto model_floats = [&booster] {
    return floats_of(booster.model_state_dict(-1, core::Stream::cpu())->flat_values(core::DType::kF32));
  };
  const std::vector<float> weights = model_floats();
  const nn::OptimizerStateDict state = *booster.optimizer_state_dict(-1);
  ASSERT_TRUE(whole.store().allocate(core::Stream::cpu()).ok());
  ASSERT_TRUE(nn::LoadHuggingFaceModel(dir, whole, whole.store()).ok());
  EXPECT_EQ(floats_of(whole.store().flat_values(core::DType::kF32)), weights);
  absl::StatusOr<nn::OptimizerStateDict> files = nn::LoadOptimizerState(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->meta, state.meta);
  testing::expect_same_tensors(*files, state);

  train_on();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  ASSERT_NE(model_floats(), weights);
  absl::StatusOr<int64_t> step = load_run_checkpoint(dir, run);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 3);
  EXPECT_EQ(model_floats(), weights);
  testing::expect_same_tensors(*booster.optimizer_state_dict(-1), state);
}

TEST(RunCheckpoint, TwoRanksSaveOnRankZeroAndResumeTheSameRun) {
  const std::string root = TestDir("ddp");
  testing::run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    auto model = testing::make_model(testing::kSeed + rank);
    auto sgd = testing::make_sgd(*model);
    Booster booster(std::move(*DdpPlugin::create(pg, {})));
    ASSERT_TRUE(booster.boost(*model, model->store(), *sgd).ok());
    train(*ctx, &booster, *model, *sgd, 2);
    auto schedule = *nn::LrScheduler::create({.kind = nn::LrScheduleKind::kConstant}, sgd->lrs());
    schedule.step();
    RunParts run;
    run.architecture = model.get();
    run.model = &model->store();
    run.optimizer = sgd.get();
    run.booster = &booster;
    run.group = pg.get();
    run.rank = rank;
    run.stream = &ctx->compute_stream();
    run.scheduler = &schedule;
    run.context = ctx.get();
    ctx->manual_seed(77 + rank);  // rank 0's RNG state is the one saved
    absl::StatusOr<std::string> dir = save_run_checkpoint(root, 2, run);
    ASSERT_TRUE(dir.ok()) << dir.status();
    EXPECT_EQ(*dir, root + "/step_000002");  // on both ranks
    const std::vector<float> saved = floats_of(model->store().flat_values(core::DType::kF32));
    const nn::OptimizerStateDict saved_opt = *sgd->state_dict();
    const core::RngState saved_rng = ctx->rng_state();

    // Train on (diverge), then resume from the checkpoint on every rank.
    train(*ctx, &booster, *model, *sgd, 1);
    ctx->manual_seed(1);
    absl::StatusOr<int64_t> step = load_run_checkpoint(*dir, run);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(*step, 2);
    EXPECT_EQ(floats_of(model->store().flat_values(core::DType::kF32)), saved);
    const nn::OptimizerStateDict loaded_opt = *sgd->state_dict();
    ASSERT_EQ(loaded_opt.tensors.size(), saved_opt.tensors.size());
    for (const auto& [name, t] : saved_opt.tensors) {
      const core::Tensor& got = loaded_opt.tensors.at(name);
      ASSERT_EQ(got.nbytes(), t.nbytes()) << name;
      EXPECT_EQ(std::memcmp(got.raw_data(), t.raw_data(), t.nbytes()), 0) << name;
    }
    if (rank == 0) {
      EXPECT_EQ(ctx->rng_state(), saved_rng);
    }
    EXPECT_EQ(schedule.state().step, 1);
  });
}

// Gemini streams its state into the files (never gathering it whole): on 2
// ranks with sharded chunks the files hold what its state dicts hold, bit for
// bit, and a load restores them.
TEST(RunCheckpoint, GeminiStreamsTheFilesItsStateDictsWouldHold) {
  const std::string root = TestDir("gemini");
  testing::run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    auto model = testing::declare_zero_model(testing::Family::kGpt2);
    auto plugin = GeminiPlugin::create(pg, testing::small_chunks("cpu"));
    ASSERT_TRUE(plugin.ok()) << plugin.status();
    Booster booster(*std::move(plugin));
    ASSERT_TRUE(booster.materialize(model->store(), testing::kSeed, core::Stream::cpu()).ok());
    auto adam = testing::declared_adam(*model);
    ASSERT_TRUE(booster.boost(*model, model->store(), *adam).ok());
    ASSERT_TRUE(booster.streams_state());
    train_boosted(*ctx, booster, *model, rank, 0, 3);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const RunParts run = boosted_parts(*model, *adam, booster, *pg, *ctx);
    absl::StatusOr<std::string> dir = save_run_checkpoint(root, 3, run);
    ASSERT_TRUE(dir.ok()) << dir.status();
    auto whole = testing::declare_zero_model(testing::Family::kGpt2);
    expect_files_hold_and_resume(*dir, run, booster, *whole,
                                 [&] { train_boosted(*ctx, booster, *model, rank, 3, 1); });
  });
}

// low_level_zero streams too (a parameter, then a gathered chunk of Adam
// state, at a time): on 2 ranks at stage 2 its files hold its state dicts
// and a resume from them (the model read as views of the files) restores them.
TEST(RunCheckpoint, LowLevelZeroStreamsAndResumesFromMappedFiles) {
  const std::string root = TestDir("zero");
  testing::run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    auto model = testing::make_zero_model(testing::kSeed);
    auto adam = testing::make_adam(*model);
    LowLevelZeroOptions o;
    o.stage = 2;
    Booster booster(*LowLevelZeroPlugin::create(pg, o));
    ASSERT_TRUE(booster.boost(*model, model->store(), *adam).ok());
    ASSERT_TRUE(booster.streams_state());
    train_boosted(*ctx, booster, *model, rank, 0, 3);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const RunParts run = boosted_parts(*model, *adam, booster, *pg, *ctx);
    absl::StatusOr<std::string> dir = save_run_checkpoint(root, 3, run);
    ASSERT_TRUE(dir.ok()) << dir.status();
    const std::vector<float> weights = floats_of(model->store().flat_values(core::DType::kF32));
    const nn::OptimizerStateDict state = *booster.optimizer_state_dict(-1);
    absl::StatusOr<nn::OptimizerStateDict> files = nn::LoadOptimizerState(*dir);
    ASSERT_TRUE(files.ok()) << files.status();
    testing::expect_same_tensors(*files, state);

    train_boosted(*ctx, booster, *model, rank, 3, 1);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_NE(floats_of(model->store().flat_values(core::DType::kF32)), weights);
    absl::StatusOr<int64_t> step = load_run_checkpoint(*dir, run);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(floats_of(model->store().flat_values(core::DType::kF32)), weights);
    testing::expect_same_tensors(*booster.optimizer_state_dict(-1), state);
  });
}

// hybrid_parallel streams too (each tensor gathered over tp and sent on from
// its pipeline stage): at tp2 x pp2 x dp2 under ZeRO-1 (GPT-2, whose tied
// head both end stages hold) and at tp2 x pp2 under ddp (Llama), its files
// hold its state dicts, and a resume from them (the model read as views of
// the files) restores them on every rank.
TEST(RunCheckpoint, HybridStreamsEveryStageAndResumes) {
  for (const testing::HybridCase& c : {testing::HybridCase{testing::Family::kGpt2, 8, 2, 1, 2},
                                       testing::HybridCase{testing::Family::kLlama, 4, 2, 0, 2}}) {
    SCOPED_TRACE(testing::case_name(c));
    const std::string root = TestDir(testing::case_name(c));
    testing::run_ranks(c.world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
      auto ctx = std::move(*core::Context::create(core::Device::cpu()));
      testing::BoostedCase b = testing::boost_case(pg, c);
      ASSERT_NE(b.model, nullptr);
      Booster& booster = *b.booster;
      ASSERT_TRUE(booster.streams_state());
      ASSERT_TRUE(testing::train_case(*ctx, booster, *b.model, c, 0, 3, nullptr));
      const RunParts run = boosted_parts(*b.model, *b.adam, booster, *pg, *ctx);
      absl::StatusOr<std::string> dir = save_run_checkpoint(root, 3, run);
      ASSERT_TRUE(dir.ok()) << dir.status();
      auto whole = testing::declare_case_model(c);
      expect_files_hold_and_resume(*dir, run, booster, *whole, [&] {
        ASSERT_TRUE(testing::train_case(*ctx, booster, *b.model, c, 3, 1, nullptr));
      });
    });
  }
}

// A hybrid save that fails on rank 0 (its folder cannot be made) still runs
// every rank's part of the stream: no rank is left waiting, every rank
// reports the failure (rank 0 its cause), and the ranks train on in step.
TEST(RunCheckpoint, HybridSaveFailingOnRankZeroLeavesNoRankWaiting) {
  const testing::HybridCase c{testing::Family::kLlama, 4, 2, 0, 2};
  const std::string blocker = TestDir("blocker");
  { std::ofstream(blocker) << "a file, not a folder"; }
  testing::run_ranks(c.world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    testing::BoostedCase b = testing::boost_case(pg, c);
    ASSERT_NE(b.model, nullptr);
    ASSERT_TRUE(testing::train_case(*ctx, *b.booster, *b.model, c, 0, 1, nullptr));
    const RunParts run = boosted_parts(*b.model, *b.adam, *b.booster, *pg, *ctx);
    absl::StatusOr<std::string> dir = save_run_checkpoint(blocker + "/run", 1, run);
    ASSERT_FALSE(dir.ok());
    if (rank == 0) {
      EXPECT_NE(dir.status().message().find(blocker), std::string::npos) << dir.status();
    } else {
      EXPECT_EQ(dir.status().code(), absl::StatusCode::kAborted) << "rank " << rank << ": " << dir.status();
    }
    ASSERT_TRUE(testing::train_case(*ctx, *b.booster, *b.model, c, 1, 1, nullptr));
  });
}

// With the job's store, a save first checks that every rank came: two saves
// together pass; when rank 1 skips the third (a script saving on rank 0
// only), rank 0's fails before any collective, naming rank 1, and both
// ranks train on in step.
TEST(RunCheckpoint, ARankSkippingASaveIsNamedNotWaitedFor) {
  const std::string root = TestDir("skipped");
  auto master = testing::serve_loopback_store();
  ASSERT_TRUE(master.ok()) << master.status();
  const int port = (*master)->port();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto pg = testing::connect_builtin_group(port, rank, 2, comm::TransportKind::kInproc);
      ASSERT_TRUE(pg.ok()) << pg.status();
      comm::TcpStoreOptions so;
      so.host = "127.0.0.1";
      so.port = port;
      so.timeout = absl::Seconds(2);  // how long the ranks that came wait
      auto store = comm::TcpStore::create(so);
      ASSERT_TRUE(store.ok()) << store.status();
      auto ctx = std::move(*core::Context::create(core::Device::cpu()));
      auto model = testing::make_model(testing::kSeed + rank);
      auto sgd = testing::make_sgd(*model);
      Booster booster(std::move(*DdpPlugin::create(*pg, {})));
      ASSERT_TRUE(booster.boost(*model, model->store(), *sgd).ok());
      RunParts run = boosted_parts(*model, *sgd, booster, **pg, *ctx);
      run.store = store->get();
      for (int step : {1, 2}) {
        train_boosted(*ctx, booster, *model, rank, step - 1, 1);
        absl::StatusOr<std::string> dir = save_run_checkpoint(root, step, run);
        ASSERT_TRUE(dir.ok()) << "rank " << rank << ": " << dir.status();
      }
      if (rank == 0) {
        absl::StatusOr<std::string> dir = save_run_checkpoint(root, 3, run);
        EXPECT_EQ(dir.status().code(), absl::StatusCode::kDeadlineExceeded) << dir.status();
        EXPECT_NE(dir.status().message().find("rank(s) 1 of 2 did not start this save"),
                  std::string::npos)
            << dir.status();
      }
      train_boosted(*ctx, booster, *model, rank, 2, 2);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(std::filesystem::exists(root + "/step_000002"));
  EXPECT_FALSE(std::filesystem::exists(root + "/step_000003"));
}

TEST(RunCheckpoint, OneProcessWithoutABoosterAndAnotherModelIsRefused) {
  const std::string root = TestDir("single");
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  auto model = testing::make_model(5);
  auto sgd = testing::make_sgd(*model);
  train(*ctx, nullptr, *model, *sgd, 2);
  const nn::GPT2Config config = model->config();
  RunParts run;
  run.architecture = model.get();
  run.model = &model->store();
  run.optimizer = sgd.get();
  run.stream = &ctx->compute_stream();
  absl::StatusOr<std::string> dir = save_run_checkpoint(root, 7, run);
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::vector<float> saved = floats_of(model->store().flat_values(core::DType::kF32));
  train(*ctx, nullptr, *model, *sgd, 1);
  absl::StatusOr<int64_t> step = load_run_checkpoint(*dir, run);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 7);
  EXPECT_EQ(floats_of(model->store().flat_values(core::DType::kF32)), saved);
  // A schedule added on resume goes on from step 7, not from its start.
  auto warmup = *nn::LrScheduler::create(
      {.kind = nn::LrScheduleKind::kConstant, .warmup_steps = 10}, sgd->lrs());
  RunParts with_schedule = run;
  with_schedule.scheduler = &warmup;
  ASSERT_TRUE(load_run_checkpoint(*dir, with_schedule).ok());
  EXPECT_EQ(warmup.state().step, 7);
  EXPECT_EQ(sgd->lrs(), warmup.lrs());

  nn::GPT2Config wider = config;
  wider.n_embd *= 2;
  auto other = std::move(*nn::GPT2::create(wider, core::DType::kF32, core::Stream::cpu()));
  RunParts other_run = run;
  other_run.architecture = other.get();
  other_run.model = &other->store();
  absl::StatusOr<int64_t> refused = load_run_checkpoint(*dir, other_run);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("is not this one"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("n_embd"), std::string::npos) << refused.status();
  RunParts missing;
  EXPECT_EQ(save_run_checkpoint(root, 1, missing).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colossal::parallel
