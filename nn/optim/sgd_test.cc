// SGD: CPU parameters over several steps against a float64 reference of
// torch.optim.SGD with per-group momentum, dampening, Nesterov and weight
// decay; state only where momentum needs it; CUDA equal to CPU bit for bit
// (GPU); errors.
#include "nn/optim/sgd.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/device/device.h"
#include "core/device/stream.h"
#include "nn/optim/test_util.h"
#include "tests/util/gpu_test.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;
using testing::random_param;
using testing::to_floats;

struct RefSgd {
  std::vector<double> p, buf;
  bool first = true;
  explicit RefSgd(const std::vector<float>& p0) : p(p0.begin(), p0.end()), buf(p0.size()) {}
  void step(const std::vector<float>& grad, const GroupHyperParams& h, double grad_scale = 1) {
    for (size_t i = 0; i < p.size(); ++i) {
      double d = grad[i] / grad_scale;
      if (h.weight_decay != 0) d += h.weight_decay * p[i];
      if (h.momentum != 0) {
        buf[i] = first ? d : h.momentum * buf[i] + (1 - h.dampening) * d;
        d = h.nesterov ? d + h.momentum * buf[i] : buf[i];
      }
      p[i] -= h.lr * d;
    }
    first = false;
  }
};

TEST(SgdTest, MatchesTorchSgdReferenceWithGroups) {
  std::vector<ParamRef> ps = {random_param("a.weight", {16, 4}, 1), random_param("a.bias", {4}, 2),
                              random_param("b.weight", {7, 3}, 3, DType::kBF16),
                              random_param("c.weight", {5}, 4)};
  ParamGroup nesterov{{ps[0], ps[1]}};
  nesterov.nesterov = true;
  nesterov.weight_decay = 1e-2;
  ParamGroup damped{{ps[2]}};
  damped.dampening = 0.25;
  damped.lr = 0.05;
  ParamGroup plain{{ps[3]}};
  plain.momentum = 0.0;
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  auto sgd = Sgd::create({nesterov, damped, plain}, o).value();
  EXPECT_EQ(sgd->type(), "sgd");
  std::vector<RefSgd> refs;
  std::vector<GroupHyperParams> hyper = {sgd->group_hyper(0), sgd->group_hyper(0),
                                         sgd->group_hyper(1), sgd->group_hyper(2)};
  EXPECT_TRUE(hyper[0].nesterov);
  EXPECT_EQ(hyper[2].dampening, 0.25);
  EXPECT_EQ(hyper[3].momentum, 0.0);
  for (const ParamRef& p : ps) refs.emplace_back(to_floats(p.master));
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < ps.size(); ++i) {
      testing::refill(ps[i].grad, 30 * step + i, -4.0f, 4.0f);
      refs[i].step(to_floats(ps[i].grad), hyper[i], 4.0);
    }
    StepOptions so;
    so.grad_scale = 4.0f;
    ASSERT_TRUE(sgd->step(so).ok());
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::vector<float> got = to_floats(ps[i].master);
    for (size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], refs[i].p[k], 2e-6) << ps[i].name;
    if (hyper[i].momentum != 0) {
      const std::vector<float> buf = to_floats(sgd->state_tensor(ps[i].name, "momentum_buffer").value());
      for (size_t k = 0; k < buf.size(); ++k) ASSERT_NEAR(buf[k], refs[i].buf[k], 2e-6) << ps[i].name;
    }
  }
  // The plain group keeps no momentum buffer.
  EXPECT_EQ(sgd->state_tensor("c.weight", "momentum_buffer").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sgd->state_tensor("a.weight", "exp_avg").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SgdTest, WritesTheModelCopy) {
  Tensor w = testing::random_cpu_tensor({10}, DType::kF16, 1);
  Tensor g = testing::random_cpu_tensor({10}, DType::kF16, 2);
  ParamRef p = make_master_param("w", w, g, core::Stream::cpu()).value();
  SgdOptions o;
  o.lr = 0.5;
  auto sgd = Sgd::create({ParamGroup{{p}}}, o).value();
  ASSERT_TRUE(sgd->step().ok());
  const std::vector<float> m = to_floats(p.master);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(w.data<kernels::Half>()[i].bits, kernels::float_to_half(m[i]).bits);
}

TEST(SgdTest, RejectsTorchsInvalidSettings) {
  ParamGroup g{{random_param("w", {3}, 1)}};
  SgdOptions o;
  o.nesterov = true;  // without momentum
  absl::Status s = Sgd::create({g}, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("param group 0: nesterov"), std::string::npos) << s;
  o.momentum = 0.9;
  o.dampening = 0.1;  // nesterov with dampening
  EXPECT_EQ(Sgd::create({g}, o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SgdOptions();
  o.momentum = -0.1;
  EXPECT_EQ(Sgd::create({g}, o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SgdOptions();
  o.weight_decay = -1;
  EXPECT_EQ(Sgd::create({g}, o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SgdCudaTest, CudaParametersEqualCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto owned = core::OwnedStream::create(core::Device::cuda(0)).value();
  const core::Stream& stream = owned.get();
  ParamRef cpu = random_param("w", {1000, 3}, 1, DType::kBF16);
  ParamRef gpu{"w", cpu.master.to(stream.device(), stream).value(),
               cpu.grad.to(stream.device(), stream).value(), {}};
  stream.synchronize();
  SgdOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 0.01;
  auto a = Sgd::create({ParamGroup{{cpu}}}, o).value();
  auto b = Sgd::create({ParamGroup{{gpu}}}, o, stream).value();
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(a->step().ok());
    ASSERT_TRUE(b->step().ok());
  }
  EXPECT_EQ(testing::to_bytes(cpu.master), testing::to_bytes(gpu.master, stream));
  EXPECT_EQ(testing::to_bytes(a->state_tensor("w", "momentum_buffer").value()),
            testing::to_bytes(b->state_tensor("w", "momentum_buffer").value(), stream));
#endif
}

}  // namespace
}  // namespace colossal::nn
