// Booster with a recording plugin: the order of the plugin's calls, the sync
// flag under (nested, moved) no_sync guards, step refused after an unsynced
// backward, the errors of calls in the wrong order, and optimizer checkpoints
// forwarded to the optimizer. (The ddp plugin's numerics:
// parallel/ddp/ddp_test.cc.)
#include "parallel/booster/booster.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/context/context.h"
#include "nn/layers/linear.h"
#include "nn/optim/module_params.h"
#include "nn/optim/sgd.h"

namespace colossal::parallel {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;

class RecordingPlugin : public Plugin {
 public:
  explicit RecordingPlugin(std::vector<std::string>* log) : log_(log) {}
  const char* name() const override { return "recording"; }
  int dp_rank() const override { return 0; }
  int dp_size() const override { return 1; }
  absl::Status boost(nn::Module& model, const nn::ParameterStore&, nn::Optimizer&) override {
    log_->push_back("boost " + model.name());
    model.add_backward_hook([this](nn::Module& m, const Tensor&) {
      log_->push_back("hook " + m.name());
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }
  absl::Status materialize(nn::ParameterStore& store, uint64_t seed,
                           const core::Stream& stream) override {
    log_->push_back("materialize");
    return Plugin::materialize(store, seed, stream);
  }
  absl::Status begin_forward(core::Context&) override {
    log_->push_back("begin_forward");
    return absl::OkStatus();
  }
  absl::Status end_forward(bool ok) override {
    log_->push_back(ok ? "end_forward ok" : "end_forward failed");
    return absl::OkStatus();
  }
  absl::Status begin_backward(core::Context&, bool sync) override {
    log_->push_back(sync ? "begin sync" : "begin no_sync");
    return absl::OkStatus();
  }
  absl::Status end_backward(bool ok) override {
    log_->push_back(ok ? "end ok" : "end failed");
    return absl::OkStatus();
  }
  absl::Status before_step(const core::Stream&) override {
    log_->push_back("before_step");
    return absl::OkStatus();
  }

 private:
  std::vector<std::string>* log_;
};

struct Fixture {
  Fixture() {
    ctx = std::move(*core::Context::create(core::Device::cpu()));
    fc = std::make_unique<nn::Linear>("fc", 3, 2, nn::LinearOptions{});
    nn::ParameterTable table;
    EXPECT_TRUE(fc->declare(table).ok());
    store = *nn::ParameterStore::create(table, Stream::cpu());
    EXPECT_TRUE(fc->bind(store).ok());
    auto params = *nn::optimizer_params(store.parameters(), Stream::cpu());
    sgd = *nn::Sgd::create({nn::ParamGroup{std::move(params)}}, nn::SgdOptions{});
    x = *Tensor::empty({4, 3}, DType::kF32, Stream::cpu());
    EXPECT_TRUE(x.set_zero(Stream::cpu()).ok());
  }
  // Forward and Booster::backward with a zero output gradient.
  absl::Status backward(Booster& booster) {
    auto out = fc->forward(*ctx, x);
    if (!out.ok()) return out.status();
    Tensor dy = *Tensor::empty(out->output.shape(), DType::kF32, Stream::cpu());
    EXPECT_TRUE(dy.set_zero(Stream::cpu()).ok());
    return booster.backward(*ctx, *fc, *out->saved, dy).status();
  }
  std::unique_ptr<core::Context> ctx;
  std::unique_ptr<nn::Linear> fc;
  nn::ParameterStore store;
  std::unique_ptr<nn::Sgd> sgd;
  Tensor x;
};

TEST(Booster, DrivesThePluginAroundBackwardAndStep) {
  std::vector<std::string> log;
  Fixture f;
  Booster booster(std::make_unique<RecordingPlugin>(&log));
  ASSERT_TRUE(booster.boost(*f.fc, f.store, *f.sgd).ok());
  ASSERT_TRUE(booster.zero_grad().ok());
  {
    Booster::NoSync outer = booster.no_sync();
    {
      std::optional<Booster::NoSync> inner;
      inner.emplace(booster.no_sync());
      Booster::NoSync moved = std::move(*inner);
      inner.reset();  // the moved-from guard releases nothing
      EXPECT_FALSE(booster.sync_enabled());
    }
    EXPECT_FALSE(booster.sync_enabled());  // nested: the outer guard still holds
    ASSERT_TRUE(f.backward(booster).ok());
    EXPECT_EQ(booster.step().status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_TRUE(booster.sync_enabled());
  ASSERT_TRUE(f.backward(booster).ok());
  ASSERT_TRUE(booster.step({.max_norm = 1.0f}).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"boost fc", "begin no_sync", "hook fc", "end ok",
                                           "begin sync", "hook fc", "end ok", "before_step"}));
}

TEST(Booster, CallsOutOfOrderAreErrors) {
  std::vector<std::string> log;
  Fixture f;
  Fixture other;
  Booster booster(std::make_unique<RecordingPlugin>(&log));
  EXPECT_EQ(f.backward(booster).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(booster.step().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(booster.zero_grad().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(booster.boost(*f.fc, f.store, *f.sgd).ok());
  EXPECT_EQ(booster.boost(*f.fc, f.store, *f.sgd).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(other.backward(booster).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(booster.plugin().dp_size(), 1);
}

// A declared model gets its memory and values from the plugin, and forward
// runs between the plugin's forward hooks.
TEST(Booster, MaterializesADeclaredModelAndForwardsThroughThePlugin) {
  std::vector<std::string> log;
  Fixture f;  // for its context, input and (unrelated) optimizer
  nn::Linear fc("fc", 3, 2, nn::LinearOptions{});
  nn::ParameterTable table;
  ASSERT_TRUE(fc.declare(table).ok());
  nn::ParameterStore store = nn::ParameterStore::declare(table);
  ASSERT_TRUE(fc.bind(store).ok());
  Booster booster(std::make_unique<RecordingPlugin>(&log));
  EXPECT_EQ(booster.boost(fc, store, *f.sgd).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(booster.forward(*f.ctx, fc, f.x).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(booster.materialize(store, /*seed=*/5, Stream::cpu()).ok());
  ASSERT_TRUE(store.materialized());
  const float* w = store.find("fc.weight")->value.data<float>();
  EXPECT_NE(w[0], 0.0f);  // N(0, 0.02) drawn
  EXPECT_EQ(store.find("fc.bias")->value.data<float>()[1], 0.0f);
  auto params = *nn::optimizer_params(store.parameters(), Stream::cpu());
  auto sgd = *nn::Sgd::create({nn::ParamGroup{std::move(params)}}, nn::SgdOptions{});
  ASSERT_TRUE(booster.boost(fc, store, *sgd).ok());
  EXPECT_EQ(booster.materialize(store, 5, Stream::cpu()).code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<nn::ForwardResult> out = booster.forward(*f.ctx, fc, f.x);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->output.shape(), core::Shape({4, 2}));
  EXPECT_EQ(booster.forward(*f.ctx, *f.fc, f.x).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<nn::ForwardResult> bad = booster.forward(*f.ctx, fc, *Tensor::empty({4, 5}, DType::kF32, Stream::cpu()));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(log, (std::vector<std::string>{"materialize", "boost fc", "begin_forward",
                                           "end_forward ok", "begin_forward",
                                           "end_forward failed"}));
}

// Plugins that leave the optimizer its state (ddp) forward checkpoints to it.
TEST(Booster, OptimizerStateDictForwardsToTheOptimizerByDefault) {
  std::vector<std::string> log;
  Fixture f;
  Booster booster(std::make_unique<RecordingPlugin>(&log));
  EXPECT_EQ(booster.optimizer_state_dict().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(booster.load_optimizer_state_dict({}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(booster.boost(*f.fc, f.store, *f.sgd).ok());
  auto sd = booster.optimizer_state_dict();
  ASSERT_TRUE(sd.ok()) << sd.status();
  const nn::OptimizerStateDict direct = *f.sgd->state_dict();
  EXPECT_TRUE(sd->meta == direct.meta);
  EXPECT_EQ(sd->tensors.size(), direct.tensors.size());
  sd->meta.groups[0].hyper.lr = 0.25;
  ASSERT_TRUE(booster.load_optimizer_state_dict(*sd).ok());
  EXPECT_EQ(f.sgd->lrs(), std::vector<double>{0.25});
  sd->meta.groups[0].params.pop_back();
  EXPECT_EQ(booster.load_optimizer_state_dict(*sd).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(log, (std::vector<std::string>{"boost fc"}));
}

}  // namespace
}  // namespace colossal::parallel
