#include "nn/module/module.h"

#include <memory>
#include <string>
#include <vector>

#include "core/status/status.h"
#include "gtest/gtest.h"
#include "nn/module/gradcheck.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

// y[i] = w[i] * x[i]^2, float64: a small module with one parameter.
class SquareScale : public Module {
 public:
  SquareScale(std::string name, int64_t n) : Module(std::move(name)), n_(n) {}
  const char* type() const override { return "SquareScale"; }

 protected:
  struct MySaved : Saved {
    SavedStats stats() const override { return saved_stats({x}); }
    Tensor x;
  };
  absl::Status declare_own(ParameterTable& table) override {
    return table.add(name() + ".weight", {n_}, DType::kF64);
  }
  absl::Status bind_own(const ParameterStore& store) override {
    COLOSSAL_ASSIGN_OR_RETURN(w_, store.find(name() + ".weight"));
    return absl::OkStatus();
  }
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const Tensor& x) override {
    if (x.numel() != n_) return absl::InvalidArgumentError("wrong size");
    COLOSSAL_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(x.shape(), DType::kF64, ctx.compute_stream()));
    for (int64_t i = 0; i < n_; ++i) {
      y.data<double>()[i] = w_.value.data<double>()[i] * x.data<double>()[i] * x.data<double>()[i];
    }
    auto saved = std::make_unique<MySaved>();
    saved->x = x;
    return ForwardResult{y, std::move(saved)};
  }
  absl::StatusOr<Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                       const Tensor& dy) override {
    COLOSSAL_ASSIGN_OR_RETURN(MySaved * s, saved_as<MySaved>(saved));
    COLOSSAL_ASSIGN_OR_RETURN(Tensor dx, Tensor::empty(dy.shape(), DType::kF64, ctx.compute_stream()));
    const double* x = s->x.data<double>();
    for (int64_t i = 0; i < n_; ++i) {
      w_.grad.data<double>()[i] += dy.data<double>()[i] * x[i] * x[i];
      dx.data<double>()[i] = dy.data<double>()[i] * 2 * w_.value.data<double>()[i] * x[i];
    }
    return dx;
  }

 private:
  int64_t n_;
  Parameter w_;
};

// SquareScale with a wrong input gradient (missing the factor 2).
class BrokenSquareScale : public SquareScale {
 public:
  using SquareScale::SquareScale;

 protected:
  absl::StatusOr<Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                       const Tensor& dy) override {
    COLOSSAL_ASSIGN_OR_RETURN(Tensor dx, SquareScale::backward_impl(ctx, saved, dy));
    for (int64_t i = 0; i < dx.numel(); ++i) dx.data<double>()[i] *= 0.5;
    return dx;
  }
};

class ModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = core::Context::create(core::Device::cpu());
    ASSERT_TRUE(ctx.ok());
    ctx_ = std::move(*ctx);
  }
  Tensor vec(std::vector<double> v) {
    Tensor t = *Tensor::empty({static_cast<int64_t>(v.size())}, DType::kF64, core::Stream::cpu());
    std::copy(v.begin(), v.end(), t.data<double>());
    return t;
  }
  std::unique_ptr<core::Context> ctx_;
};

TEST_F(ModuleTest, SequentialForwardBackwardHooksAndGradcheck) {
  Sequential net("net");
  net.append(std::make_unique<SquareScale>("net.0", 3));
  net.append(std::make_unique<SquareScale>("net.1", 3));
  ParameterTable table;
  ASSERT_TRUE(net.declare(table).ok());
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table.entries()[0].name, "net.0.weight");
  absl::StatusOr<ParameterStore> store = ParameterStore::create(table, core::Stream::cpu());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(net.bind(*store).ok());
  for (const Parameter& p : store->parameters()) {
    for (int i = 0; i < 3; ++i) p.value.data<double>()[i] = 0.5 + i;
  }

  std::vector<std::string> events;
  Module& first = net.at(0);
  first.add_forward_pre_hook([&](Module& m, const Tensor&) {
    events.push_back("pre-forward " + m.name());
    return absl::OkStatus();
  });
  first.add_forward_hook([&](Module& m, const Tensor&) {
    events.push_back("forward " + m.name());
    return absl::OkStatus();
  });
  net.at(1).add_backward_pre_hook([&](Module& m, const Tensor&) {
    events.push_back("pre-backward " + m.name());
    return absl::OkStatus();
  });
  first.add_backward_hook([&](Module& m, const Tensor& dx) {
    events.push_back("backward " + m.name() + (dx.defined() ? " dx" : ""));
    return absl::OkStatus();
  });

  Tensor x = vec({1.0, -2.0, 0.5});
  absl::StatusOr<ForwardResult> out = net.forward(*ctx_, x);
  ASSERT_TRUE(out.ok()) << out.status();
  // y = w1 * (w0 x^2)^2 with w = {0.5, 1.5, 2.5}.
  EXPECT_DOUBLE_EQ(out->output.data<double>()[1], 1.5 * (1.5 * 4) * (1.5 * 4));
  absl::StatusOr<Tensor> dx = net.backward(*ctx_, *out->saved, vec({1, 1, 1}));
  ASSERT_TRUE(dx.ok()) << dx.status();
  EXPECT_EQ(events, (std::vector<std::string>{"pre-forward net.0", "forward net.0",
                                              "pre-backward net.1", "backward net.0 dx"}));

  // Gradients accumulate: a second backward doubles them.
  const double g = store->find("net.0.weight")->grad.data<double>()[0];
  ASSERT_TRUE(net.backward(*ctx_, *out->saved, vec({1, 1, 1})).ok());
  EXPECT_DOUBLE_EQ(store->find("net.0.weight")->grad.data<double>()[0], 2 * g);

  absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, net, *store, x, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checked, 9);
  EXPECT_LT(r->max_error, 1e-7) << r->worst;
}

TEST_F(ModuleTest, GradcheckCatchesAWrongBackward) {
  BrokenSquareScale m("m", 3);
  ParameterTable table;
  ASSERT_TRUE(m.declare(table).ok());
  ParameterStore store = *ParameterStore::create(table, core::Stream::cpu());
  ASSERT_TRUE(m.bind(store).ok());
  for (int i = 0; i < 3; ++i) store.parameters()[0].value.data<double>()[i] = 1.0 + i;
  absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, m, store, vec({1.0, -2.0, 0.5}), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->max_error, 0.1);
  EXPECT_NE(r->worst.find("input["), std::string::npos) << r->worst;
}

TEST_F(ModuleTest, SequentialErrorsNameTheChild) {
  Sequential net("net");
  net.append(std::make_unique<SquareScale>("net.0", 3));
  net.append(std::make_unique<SquareScale>("net.1", 2));
  ParameterTable table;
  ASSERT_TRUE(net.declare(table).ok());
  ParameterStore store = *ParameterStore::create(table, core::Stream::cpu());
  ASSERT_TRUE(net.bind(store).ok());
  absl::StatusOr<ForwardResult> out = net.forward(*ctx_, vec({1, 2, 3}));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "Sequential net: child 1 (SquareScale): SquareScale net.1: wrong size");
}

TEST_F(ModuleTest, HookErrorsStopTheCall) {
  SquareScale m("m", 1);
  ParameterTable table;
  ASSERT_TRUE(m.declare(table).ok());
  ParameterStore store = *ParameterStore::create(table, core::Stream::cpu());
  ASSERT_TRUE(m.bind(store).ok());
  m.add_forward_pre_hook([](Module&, const Tensor&) { return absl::UnavailableError("gather"); });
  absl::StatusOr<ForwardResult> out = m.forward(*ctx_, vec({1}));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(out.status().message().find("forward pre-hook"), std::string::npos);
}

// Checkpointing a container and, inside it, one child: the outer backward
// re-runs both children, the inner one re-runs its child again; gradients
// (and the gradient check) are unchanged.
TEST_F(ModuleTest, NestedCheckpointingRecomputesAndKeepsGradients) {
  Sequential net("net");
  net.append(std::make_unique<SquareScale>("net.0", 3));
  net.append(std::make_unique<SquareScale>("net.1", 3));
  ParameterTable table;
  ASSERT_TRUE(net.declare(table).ok());
  ParameterStore store = *ParameterStore::create(table, core::Stream::cpu());
  ASSERT_TRUE(net.bind(store).ok());
  for (const Parameter& p : store.parameters()) {
    for (int i = 0; i < 3; ++i) p.value.data<double>()[i] = 0.5 + i;
  }
  Tensor x = vec({1.0, -2.0, 0.5}), dy = vec({0.3, -1.0, 2.0});
  auto grads = [&] {
    EXPECT_TRUE(store.zero_grad(core::Stream::cpu()).ok());
    ForwardResult out = *net.forward(*ctx_, x);
    Tensor dx = *net.backward(*ctx_, *out.saved, dy);
    std::vector<double> g(dx.data<double>(), dx.data<double>() + 3);
    for (const Parameter& p : store.parameters()) {
      g.insert(g.end(), p.grad.data<double>(), p.grad.data<double>() + 3);
    }
    return g;
  };
  const std::vector<double> plain = grads();

  std::vector<std::string> events;
  for (size_t i = 0; i < net.size(); ++i) {
    net.at(i).add_forward_pre_hook([&](Module& m, const Tensor&) {
      events.push_back(m.name() + (m.recomputing() ? " recompute" : ""));
      return absl::OkStatus();
    });
  }
  net.set_checkpoint(true);
  net.at(1).set_checkpoint(true);
  ForwardResult out = *net.forward(*ctx_, x);
  EXPECT_EQ(out.saved->stats().tensors, 1);
  EXPECT_EQ(out.saved->stats().bytes, 3 * 8);
  EXPECT_EQ(grads(), plain);
  // grads() ran one forward and one backward after the forward above.
  EXPECT_EQ(events, (std::vector<std::string>{"net.0", "net.1",               // forward above
                                              "net.0", "net.1",               // grads() forward
                                              "net.0 recompute", "net.1 recompute",  // net's
                                              "net.1 recompute"}));           // net.1's own
  EXPECT_FALSE(net.recomputing());
  EXPECT_FALSE(net.at(1).recomputing());
  absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, net, store, x, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(r->max_error, 1e-7) << r->worst;
}

TEST_F(ModuleTest, BindFailsForUndeclaredParameters) {
  SquareScale m("m", 1);
  ParameterTable table;
  ParameterStore store = *ParameterStore::create(table, core::Stream::cpu());
  absl::Status s = m.bind(store);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("SquareScale m"), std::string::npos) << s;
}

}  // namespace
}  // namespace colossal::nn
