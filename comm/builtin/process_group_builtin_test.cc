// The builtin ProcessGroup's behaviour beyond correct results: subgroups,
// ranks that disagree (different collectives, sizes, tags), a broken group
// staying broken, CUDA buffers refused, cancellation on destruction, tensors.
#include "comm/builtin/process_group_builtin.h"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <atomic>
#include <string>
#include <vector>

#include "comm/testing/ranks.h"
#include "core/tensor/tensor.h"

namespace colossal::comm {
namespace {

using GroupPtr = std::shared_ptr<ProcessGroupBuiltin>;

void with_group(int world, TransportKind kind, const std::function<void(ProcessGroupBuiltin&, Store&)>& body) {
  auto master = testing::loopback_store();
  ASSERT_NE(master, nullptr);
  testing::run_ranks(world, [&](int rank) {
    auto store = testing::store_client(master->port());
    BuiltinOptions o;
    o.transport = kind;
    o.timeout = absl::Seconds(20);
    o.tcp.address = "127.0.0.1";
    auto pg = ProcessGroupBuiltin::create(store, rank, world, o);
    ASSERT_TRUE(pg.ok()) << pg.status();
    body(**pg, *store);
  });
}

absl::Status run(absl::StatusOr<WorkPtr> w) {
  if (!w.ok()) return w.status();
  return (*w)->wait(absl::Seconds(30));
}

TEST(ProcessGroupBuiltinTest, Subgroups) {
  with_group(4, TransportKind::kShm, [](ProcessGroupBuiltin& pg, Store&) {
    const int me = pg.rank();
    EXPECT_EQ(pg.backend_name(), "builtin/shm");
    // Evens and odds; every rank makes both calls, non-members get nullptr.
    auto evens = pg.new_group({0, 2});
    auto odds = pg.new_group({1, 3});
    ASSERT_TRUE(evens.ok()) << evens.status();
    ASSERT_TRUE(odds.ok()) << odds.status();
    std::shared_ptr<ProcessGroup> mine = me % 2 == 0 ? *evens : *odds;
    std::shared_ptr<ProcessGroup> other = me % 2 == 0 ? *odds : *evens;
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(other, nullptr);
    EXPECT_EQ(mine->size(), 2);
    EXPECT_EQ(mine->rank(), me / 2);
    EXPECT_EQ(mine->world_ranks(), me % 2 == 0 ? std::vector<int>({0, 2}) : std::vector<int>({1, 3}));
    float x = static_cast<float>(me);
    ASSERT_TRUE(run(mine->all_reduce(Buffer::cpu(&x, 1), ReduceOp::kSum)).ok());
    EXPECT_EQ(x, me % 2 == 0 ? 2.0f : 4.0f);
    // The parent still works, interleaved with the subgroup.
    float y = 1;
    ASSERT_TRUE(run(pg.all_reduce(Buffer::cpu(&y, 1), ReduceOp::kSum)).ok());
    EXPECT_EQ(y, 4.0f);
    // A subgroup of a subgroup: world ranks compose.
    auto solo = mine->new_group({1});
    ASSERT_TRUE(solo.ok()) << solo.status();
    if (mine->rank() == 1) {
      ASSERT_NE(*solo, nullptr);
      EXPECT_EQ((*solo)->world_ranks(), std::vector<int>({me}));
      EXPECT_TRUE(run((*solo)->barrier()).ok());
    } else {
      EXPECT_EQ(*solo, nullptr);
    }
    // A reversed order gives reversed group ranks.
    auto reversed = pg.new_group({3, 2, 1, 0});
    ASSERT_TRUE(reversed.ok());
    EXPECT_EQ((*reversed)->rank(), 3 - me);
    int64_t v = me;
    ASSERT_TRUE(run((*reversed)->broadcast(Buffer::cpu(&v, 1), 0)).ok());
    EXPECT_EQ(v, 3);
  });
}

TEST(ProcessGroupBuiltinTest, DifferentCollectivesAreReportedNotHung) {
  with_group(2, TransportKind::kInproc, [](ProcessGroupBuiltin& pg, Store& store) {
    std::vector<float> buf(pg.rank() == 0 ? 10 : 20, 1.0f);
    CollectiveOptions o;
    o.timeout = absl::Seconds(10);
    absl::Status s = run(pg.all_reduce(Buffer::cpu(buf.data(), buf.size()), ReduceOp::kSum, o));
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("all_reduce #0"), std::string::npos) << s;
    EXPECT_NE(s.message().find("different collectives, sizes or tags"), std::string::npos) << s;
    // Broken from now on, with the reason.
    absl::Status later = run(pg.barrier());
    EXPECT_TRUE(absl::IsFailedPrecondition(later)) << later;
    EXPECT_NE(later.message().find("earlier failure"), std::string::npos) << later;
  });
}

// COLOSSAL_CHECK_COLLECTIVES=1: ranks post each collective in the store
// before issuing it. Agreeing ranks run as before (subgroups too); ranks
// that differ are told at the call, every rank's listed; a rank that never
// comes is named when the operation's timeout runs out.
TEST(ProcessGroupBuiltinTest, CheckedCollectivesNameTheRanksThatDiffer) {
  ASSERT_EQ(setenv("COLOSSAL_CHECK_COLLECTIVES", "1", 1), 0);
  with_group(2, TransportKind::kInproc, [](ProcessGroupBuiltin& pg, Store&) {
    std::vector<float> buf(4, 1.0f + pg.rank());
    ASSERT_TRUE(run(pg.all_reduce(Buffer::cpu(buf.data(), buf.size()), ReduceOp::kSum)).ok());
    EXPECT_EQ(buf[0], 3.0f);
    ASSERT_TRUE(run(pg.broadcast(Buffer::cpu(buf.data(), buf.size()), 1)).ok());
    auto sub = pg.new_group({0, 1});
    ASSERT_TRUE(sub.ok()) << sub.status();
    ASSERT_TRUE(run((*sub)->barrier()).ok());
    std::vector<float> mine(pg.rank() == 0 ? 8 : 9, 1.0f);
    absl::StatusOr<WorkPtr> differ =
        pg.all_reduce(Buffer::cpu(mine.data(), mine.size()), ReduceOp::kSum);
    EXPECT_TRUE(absl::IsFailedPrecondition(differ.status())) << differ.status();
    EXPECT_NE(differ.status().message().find(
                  "the ranks issue different collectives; world rank 0: all_reduce (sum, float32 x "
                  "8); world rank 1: all_reduce (sum, float32 x 9)"),
              std::string::npos)
        << differ.status();
  });
  with_group(2, TransportKind::kInproc, [](ProcessGroupBuiltin& pg, Store&) {
    if (pg.rank() == 1) return;  // skips the collective
    CollectiveOptions o;
    o.timeout = absl::Seconds(1);
    absl::StatusOr<WorkPtr> alone = pg.barrier(o);
    EXPECT_EQ(alone.status().code(), absl::StatusCode::kDeadlineExceeded) << alone.status();
    EXPECT_NE(alone.status().message().find("world rank(s) 1 did not issue it"), std::string::npos)
        << alone.status();
  });
  ASSERT_EQ(unsetenv("COLOSSAL_CHECK_COLLECTIVES"), 0);
}

TEST(ProcessGroupBuiltinTest, TagsMustAgree) {
  with_group(2, TransportKind::kTcp, [](ProcessGroupBuiltin& pg, Store&) {
    float x = 1;
    CollectiveOptions o;
    o.tag = pg.rank() == 0 ? 1 : 2;
    absl::Status s = run(pg.broadcast(Buffer::cpu(&x, 1), 0, o));
    if (pg.rank() == 1) {  // the receiver sees the sender's tag
      EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
      EXPECT_NE(s.message().find("tag 1"), std::string::npos) << s;
    }
  });
}

TEST(ProcessGroupBuiltinTest, SendRecvSizesMustAgree) {
  with_group(2, TransportKind::kShm, [](ProcessGroupBuiltin& pg, Store&) {
    std::vector<int32_t> buf(pg.rank() == 0 ? 4 : 5);
    absl::Status s = pg.rank() == 0 ? run(pg.send(Buffer::cpu(buf.data(), 4), 1))
                                    : run(pg.recv(Buffer::cpu(buf.data(), 5), 0));
    if (pg.rank() == 1) {
      EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
      EXPECT_NE(s.message().find("send #0 tag 0 with 16 bytes"), std::string::npos) << s;
    }
  });
}

TEST(ProcessGroupBuiltinTest, CudaBuffersNeedNccl) {
  with_group(1, TransportKind::kShm, [](ProcessGroupBuiltin& pg, Store&) {
    float x = 0;
    auto w = pg.all_reduce(Buffer{&x, 1, DType::kF32, core::Device::cuda(0)}, ReduceOp::kSum);
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(w.status()));
    EXPECT_NE(w.status().message().find("nccl"), std::string::npos) << w.status();
  });
}

TEST(ProcessGroupBuiltinTest, WaitTimeoutLeavesTheWorkRunningAndDestructionCancels) {
  auto master = testing::loopback_store();
  testing::run_ranks(2, [&](int rank) {
    auto store = testing::store_client(master->port());
    BuiltinOptions o;
    o.transport = TransportKind::kInproc;
    auto pg = ProcessGroupBuiltin::create(store, rank, 2, o);
    ASSERT_TRUE(pg.ok());
    if (rank == 0) {
      // Rank 1 never joins: the first all_reduce blocks, the second waits in the queue.
      float a = 1, b = 2;
      auto w1 = (*pg)->all_reduce(Buffer::cpu(&a, 1), ReduceOp::kSum);
      auto w2 = (*pg)->all_reduce(Buffer::cpu(&b, 1), ReduceOp::kSum);
      ASSERT_TRUE(w1.ok() && w2.ok());
      absl::Status early = (*w1)->wait(absl::Milliseconds(50));
      EXPECT_TRUE(absl::IsDeadlineExceeded(early)) << early;
      EXPECT_NE(early.message().find("still running"), std::string::npos) << early;
      EXPECT_FALSE((*w2)->is_completed());
      pg->reset();  // destroys the group
      EXPECT_TRUE(absl::IsCancelled((*w1)->status())) << (*w1)->status();
      EXPECT_TRUE(absl::IsCancelled((*w2)->status())) << (*w2)->status();
    }
    EXPECT_TRUE(barrier(*store, "done", 2, absl::Seconds(20)).ok());
  });
}

TEST(ProcessGroupBuiltinTest, TensorsAllReduce) {
  with_group(3, TransportKind::kShm, [](ProcessGroupBuiltin& pg, Store&) {
    auto t = core::Tensor::empty({5, 7}, DType::kF32, core::Stream::cpu());
    ASSERT_TRUE(t.ok()) << t.status();
    float* p = t->data<float>();
    for (int i = 0; i < 35; ++i) p[i] = static_cast<float>(i * (pg.rank() + 1));
    ASSERT_TRUE(run(pg.all_reduce(*t, ReduceOp::kSum)).ok());
    for (int i = 0; i < 35; ++i) EXPECT_EQ(p[i], static_cast<float>(6 * i));
    auto gathered = core::Tensor::empty({15, 7}, DType::kF32, core::Stream::cpu());
    ASSERT_TRUE(run(pg.all_gather(*gathered, *t)).ok());
    EXPECT_EQ(gathered->data<float>()[35 * 2 + 1], 6.0f);
  });
}

TEST(ProcessGroupBuiltinTest, InvalidCreation) {
  auto master = testing::loopback_store();
  auto pg = ProcessGroupBuiltin::create(master, 3, 2, {});
  EXPECT_TRUE(absl::IsInvalidArgument(pg.status())) << pg.status();
  EXPECT_NE(pg.status().message().find("WORLD_SIZE"), std::string::npos);
  EXPECT_TRUE(parse_transport_kind(" TCP ").ok());
  auto bad = parse_transport_kind("infiniband");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("shm, tcp, inproc"), std::string::npos);
}

}  // namespace
}  // namespace colossal::comm
