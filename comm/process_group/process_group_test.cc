// The validate-and-enqueue path every backend shares, through a recording
// fake backend: argument errors, sequence numbers, descriptions, options,
// in-place detection, Tensor overloads and subgroup naming.
#include "comm/process_group/process_group.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace colossal::comm {
namespace {

class FakeGroup : public ProcessGroup {
 public:
  FakeGroup(int rank, int size)
      : ProcessGroup(rank, size, world_of(size), absl::Seconds(42)) {}
  std::string backend_name() const override { return "fake"; }

  std::vector<OpInfo> ops;
  std::vector<std::string> subgroup_names;
  std::vector<int64_t> last_out_counts, last_in_counts;

 protected:
  static std::vector<int> world_of(int size) {
    std::vector<int> w(size);
    for (int i = 0; i < size; ++i) w[i] = i;
    return w;
  }
  absl::Status check_device(const core::Device& device) const override {
    if (device.is_cpu()) return absl::OkStatus();
    return absl::InvalidArgumentError("fake backend: host memory only");
  }
  WorkPtr done(const OpInfo& info) {
    ops.push_back(info);
    auto w = std::make_shared<Work>(info.description);
    w->complete(absl::OkStatus());
    return w;
  }
  absl::StatusOr<WorkPtr> do_all_reduce(const OpInfo& i, const Buffer&, ReduceOp) override {
    return done(i);
  }
  absl::StatusOr<WorkPtr> do_reduce_scatter(const OpInfo& i, const Buffer&, const Buffer&,
                                            ReduceOp) override {
    return done(i);
  }
  absl::StatusOr<WorkPtr> do_all_gather(const OpInfo& i, const Buffer&, const Buffer&) override {
    return done(i);
  }
  absl::StatusOr<WorkPtr> do_all_to_all(const OpInfo& i, const Buffer&, std::vector<int64_t> oc,
                                        const Buffer&, std::vector<int64_t> ic) override {
    last_out_counts = oc;
    last_in_counts = ic;
    return done(i);
  }
  absl::StatusOr<WorkPtr> do_broadcast(const OpInfo& i, const Buffer&, int) override {
    return done(i);
  }
  absl::StatusOr<WorkPtr> do_batch_send_recv(const OpInfo& i, std::vector<P2POp>) override {
    return done(i);
  }
  absl::StatusOr<WorkPtr> do_barrier(const OpInfo& i) override { return done(i); }
  absl::StatusOr<std::shared_ptr<ProcessGroup>> do_new_group(const std::string& name,
                                                             std::vector<int> world_ranks,
                                                             int group_rank) override {
    subgroup_names.push_back(name);
    return std::shared_ptr<ProcessGroup>(
        std::make_shared<FakeGroup>(group_rank, static_cast<int>(world_ranks.size())));
  }
};

void expect_invalid(const absl::StatusOr<WorkPtr>& w, const std::string& fragment) {
  ASSERT_FALSE(w.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_TRUE(absl::IsInvalidArgument(w.status())) << w.status();
  EXPECT_NE(w.status().message().find(fragment), std::string::npos) << w.status();
}

TEST(ProcessGroupTest, SequenceNumbersDescriptionsAndOptions) {
  FakeGroup g(1, 4);
  std::vector<float> a(8);
  ASSERT_TRUE(g.all_reduce(Buffer::cpu(a.data(), 8), ReduceOp::kAvg).ok());
  CollectiveOptions o;
  o.timeout = absl::Seconds(3);
  o.tag = 9;
  ASSERT_TRUE(g.broadcast(Buffer::cpu(a.data(), 8), 2, o).ok());
  ASSERT_TRUE(g.barrier().ok());
  ASSERT_EQ(g.ops.size(), 3u);
  EXPECT_EQ(g.ops[0].seq, 0u);
  EXPECT_EQ(g.ops[1].seq, 1u);
  EXPECT_EQ(g.ops[2].seq, 2u);
  EXPECT_EQ(g.ops[0].description, "all_reduce #0 (avg, float32 x 8 on cpu)");
  EXPECT_EQ(g.ops[0].timeout, absl::Seconds(42));  // the group default
  EXPECT_EQ(g.ops[0].bytes, 32u);
  EXPECT_EQ(g.ops[1].timeout, absl::Seconds(3));
  EXPECT_EQ(g.ops[1].tag, 9u);
  EXPECT_EQ(g.ops[1].description, "broadcast #1 tag 9 (root 2, float32 x 8 on cpu)");
  EXPECT_EQ(g.ops[2].type, OpType::kBarrier);
}

// A group of one rank: all_reduce is the identity and reaches no backend
// (ddp and ZeRO on one GPU launch nothing), yet still takes its sequence
// number and checks its buffer.
TEST(ProcessGroupTest, AllReduceOfOneRankIsDoneAtOnce) {
  FakeGroup g(0, 1);
  std::vector<float> a = {1.5f, -2.0f, 3.25f};
  absl::StatusOr<WorkPtr> w = g.all_reduce(Buffer::cpu(a.data(), 3), ReduceOp::kAvg);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE((*w)->is_completed());
  EXPECT_TRUE((*w)->wait().ok());
  EXPECT_EQ(a, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_TRUE(g.ops.empty());
  ASSERT_TRUE(g.barrier().ok());
  ASSERT_EQ(g.ops.size(), 1u);
  EXPECT_EQ(g.ops[0].seq, 1u);  // the all_reduce took #0
  std::vector<int32_t> ints(2, 7);
  expect_invalid(g.all_reduce(Buffer::cpu(ints.data(), 2), ReduceOp::kAvg), "avg");
}

TEST(ProcessGroupTest, BufferErrors) {
  FakeGroup g(0, 2);
  expect_invalid(g.all_reduce(Buffer{nullptr, 3, DType::kF32}, ReduceOp::kSum), "null");
  expect_invalid(g.all_reduce(Buffer{nullptr, -1, DType::kF32}, ReduceOp::kSum), "negative");
  std::vector<int64_t> ints(4);
  expect_invalid(g.all_reduce(Buffer::cpu(ints.data(), 4), ReduceOp::kAvg), "floating-point");
  float x = 0;
  expect_invalid(g.all_reduce(Buffer{&x, 1, DType::kF32, core::Device::cuda(0)}, ReduceOp::kSum),
                 "host memory only");
  EXPECT_TRUE(g.ops.empty()) << "nothing reaches the backend";
  // Empty buffers are fine.
  EXPECT_TRUE(g.all_reduce(Buffer{nullptr, 0, DType::kF32}, ReduceOp::kSum).ok());
}

TEST(ProcessGroupTest, ReduceScatterAndAllGatherShapes) {
  FakeGroup g(1, 3);
  std::vector<float> in(9), out(3), wrong(4);
  std::vector<double> other(3);
  EXPECT_TRUE(g.reduce_scatter(Buffer::cpu(out.data(), 3), Buffer::cpu(in.data(), 9), ReduceOp::kSum).ok());
  expect_invalid(g.reduce_scatter(Buffer::cpu(wrong.data(), 4), Buffer::cpu(in.data(), 9), ReduceOp::kSum),
                 "needs 12");
  expect_invalid(g.reduce_scatter(Buffer::cpu(other.data(), 3), Buffer::cpu(in.data(), 9), ReduceOp::kSum),
                 "differ in dtype");
  // In place at this rank's slice is accepted; another overlap is not.
  EXPECT_TRUE(g.reduce_scatter(Buffer::cpu(in.data() + 3, 3), Buffer::cpu(in.data(), 9), ReduceOp::kMax).ok());
  expect_invalid(g.reduce_scatter(Buffer::cpu(in.data() + 1, 3), Buffer::cpu(in.data(), 9), ReduceOp::kMax),
                 "overlaps");
  EXPECT_TRUE(g.all_gather(Buffer::cpu(in.data(), 9), Buffer::cpu(out.data(), 3)).ok());
  EXPECT_TRUE(g.all_gather(Buffer::cpu(in.data(), 9), Buffer::cpu(in.data() + 3, 3)).ok());
  expect_invalid(g.all_gather(Buffer::cpu(in.data(), 9), Buffer::cpu(in.data(), 3)), "overlaps");
  expect_invalid(g.all_gather(Buffer::cpu(in.data(), 9), Buffer::cpu(wrong.data(), 4)), "needs 12");
}

TEST(ProcessGroupTest, AllToAllCounts) {
  FakeGroup g(0, 3);
  std::vector<float> in(6), out(6);
  EXPECT_TRUE(g.all_to_all(Buffer::cpu(out.data(), 6), Buffer::cpu(in.data(), 6)).ok());
  EXPECT_EQ(g.last_in_counts, (std::vector<int64_t>{2, 2, 2}));
  expect_invalid(g.all_to_all(Buffer::cpu(out.data(), 5), Buffer::cpu(in.data(), 5)), "divisible");
  const std::vector<int64_t> ok_in = {1, 0, 5}, ok_out = {3, 3, 0};
  EXPECT_TRUE(g.all_to_all(Buffer::cpu(out.data(), 6), ok_out, Buffer::cpu(in.data(), 6), ok_in).ok());
  EXPECT_EQ(g.last_out_counts, ok_out);
  const std::vector<int64_t> short_counts = {3, 3}, negative = {7, -1, 0}, bad_sum = {1, 1, 1};
  expect_invalid(g.all_to_all(Buffer::cpu(out.data(), 6), short_counts, Buffer::cpu(in.data(), 6), ok_in),
                 "2 output counts");
  expect_invalid(g.all_to_all(Buffer::cpu(out.data(), 6), ok_out, Buffer::cpu(in.data(), 6), negative),
                 "negative");
  expect_invalid(g.all_to_all(Buffer::cpu(out.data(), 6), ok_out, Buffer::cpu(in.data(), 6), bad_sum),
                 "sum to 3");
  expect_invalid(g.all_to_all(Buffer::cpu(in.data(), 6), Buffer::cpu(in.data(), 6)), "overlap");
}

TEST(ProcessGroupTest, RootsAndPeers) {
  FakeGroup g(1, 2);
  float x = 0;
  expect_invalid(g.broadcast(Buffer::cpu(&x, 1), 2), "root 2");
  expect_invalid(g.reduce(Buffer::cpu(&x, 1), ReduceOp::kSum, -1), "root -1");
  std::vector<int32_t> ints(2, 7);
  expect_invalid(g.reduce(Buffer::cpu(ints.data(), 2), ReduceOp::kAvg, 0), "avg");
  // A backend without a reduce of its own runs an all-reduce for it.
  ASSERT_TRUE(g.reduce(Buffer::cpu(&x, 1), ReduceOp::kSum, 0).ok());
  EXPECT_EQ(g.ops.back().type, OpType::kReduce);
  EXPECT_EQ(g.ops.back().description, "reduce #0 (sum to root 0, float32 x 1 on cpu)");
  expect_invalid(g.send(Buffer::cpu(&x, 1), 1), "is this rank");
  expect_invalid(g.recv(Buffer::cpu(&x, 1), -1), "not a rank");
  EXPECT_TRUE(g.send(Buffer::cpu(&x, 1), 0).ok());
  EXPECT_EQ(g.ops.back().type, OpType::kSend);
  EXPECT_EQ(g.ops.back().description, "send #1 (send to rank 0: float32 x 1 on cpu)");
  expect_invalid(g.batch_send_recv({}), "no operations");
}

TEST(ProcessGroupTest, TensorOverloads) {
  FakeGroup g(0, 2);
  auto t = core::Tensor::empty({2, 3}, DType::kBF16, core::Stream::cpu());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(g.all_reduce(*t, ReduceOp::kSum).ok());
  EXPECT_EQ(g.ops.back().description, "all_reduce #0 (sum, bfloat16 x 6 on cpu)");
  auto gathered = core::Tensor::empty({4, 3}, DType::kBF16, core::Stream::cpu());
  ASSERT_TRUE(g.all_gather(*gathered, *t).ok());
  expect_invalid(g.all_reduce(core::Tensor(), ReduceOp::kSum), "undefined tensor");
}

TEST(ProcessGroupTest, NewGroupValidatesAndNamesInstances) {
  FakeGroup g(2, 4);
  auto a = g.new_group({2, 0});
  ASSERT_TRUE(a.ok());
  ASSERT_NE(*a, nullptr);
  EXPECT_EQ((*a)->rank(), 0);  // position in the list
  EXPECT_EQ((*a)->size(), 2);
  auto b = g.new_group({2, 0});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(g.subgroup_names, (std::vector<std::string>{"subgroup/2,0/0", "subgroup/2,0/1"}));
  auto outsider = g.new_group({0, 1});
  ASSERT_TRUE(outsider.ok());
  EXPECT_EQ(*outsider, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(g.new_group({}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(g.new_group({1, 1}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(g.new_group({4}).status()));
}

TEST(ProcessGroupTest, Names) {
  EXPECT_STREQ(reduce_op_name(ReduceOp::kAvg), "avg");
  EXPECT_STREQ(op_type_name(OpType::kReduceScatter), "reduce_scatter");
  std::vector<float> v(3);
  EXPECT_EQ(Buffer::cpu(v.data(), 3).to_string(), "float32 x 3 on cpu");
}

// COLOSSAL_TIMEOUT: seconds, positive, at most a week; unset or empty is
// nullopt (the defaults); anything else names the value.
TEST(ProcessGroupTest, TimeoutFromEnvironment) {
  unsetenv("COLOSSAL_TIMEOUT");
  ASSERT_TRUE(timeout_from_env().ok());
  EXPECT_EQ(*timeout_from_env(), std::nullopt);
  setenv("COLOSSAL_TIMEOUT", "", 1);
  EXPECT_EQ(*timeout_from_env(), std::nullopt);
  setenv("COLOSSAL_TIMEOUT", "90", 1);
  EXPECT_EQ(*timeout_from_env(), absl::Seconds(90));
  setenv("COLOSSAL_TIMEOUT", "2.5", 1);
  EXPECT_EQ(*timeout_from_env(), absl::Milliseconds(2500));
  for (const char* bad : {"0", "-5", "ten", "1e9", "nan", "inf", "30s"}) {
    setenv("COLOSSAL_TIMEOUT", bad, 1);
    const absl::StatusOr<std::optional<absl::Duration>> t = timeout_from_env();
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.status().message().find(std::string("COLOSSAL_TIMEOUT=\"") + bad + "\""),
              std::string::npos)
        << t.status();
  }
  unsetenv("COLOSSAL_TIMEOUT");
}

}  // namespace
}  // namespace colossal::comm
