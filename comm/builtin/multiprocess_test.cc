// The builtin backend across processes: this binary spawns itself as the
// ranks (comm/testing/multiprocess.h), the parent serves the TCP store on
// 127.0.0.1, and every child runs collectives over shared memory or TCP and
// checks them against the serial references. Also: a rank that never joins a
// collective (a clear timeout) and a rank that dies (noticed long before the
// timeout).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/builtin/child_group_testing.h"
#include "comm/builtin/process_group_builtin.h"
#include "comm/store/tcp_store.h"
#include "comm/testing/multiprocess.h"
#include "comm/testing/reference.h"

namespace colossal::comm {
namespace {

using testing::child_env;

struct ChildConfig : testing::ChildRank {
  TransportKind transport = TransportKind::kShm;
};

// The child's configuration, or nullopt in a normal (parent) run.
std::optional<ChildConfig> child_config() {
  auto r = testing::child_rank();
  if (!r) return std::nullopt;
  ChildConfig c{*r};
  auto t = parse_transport_kind(child_env("COMM_TEST_TRANSPORT"));
  EXPECT_TRUE(t.ok());
  c.transport = t.ok() ? *t : TransportKind::kShm;
  return c;
}

std::shared_ptr<ProcessGroup> child_group(const ChildConfig& c, std::shared_ptr<Store>* store_out) {
  BuiltinOptions o;
  o.transport = c.transport;
  o.timeout = absl::Seconds(20);
  o.tcp.address = "127.0.0.1";
  return testing::child_builtin_group(c, o, store_out);
}

absl::Status run_and_wait(absl::StatusOr<WorkPtr> w) {
  if (!w.ok()) return w.status();
  return (*w)->wait(absl::Seconds(30));
}

// Runs in each child: collectives checked against references.
void child_collectives(const ChildConfig& c) {
  auto pg = child_group(c, nullptr);
  ASSERT_NE(pg, nullptr);
  const int P = c.world, me = c.rank;
  std::vector<std::vector<uint8_t>> in;
  // all_reduce, odd sizes, three dtypes.
  struct Case { DType dtype; ReduceOp op; int64_t n; };
  for (const Case& k : {Case{DType::kF32, ReduceOp::kSum, 1000003}, Case{DType::kBF16, ReduceOp::kMax, 7},
                        Case{DType::kI64, ReduceOp::kSum, 1}, Case{DType::kBF16, ReduceOp::kAvg, 1001}}) {
    in.clear();
    for (int r = 0; r < P; ++r) in.push_back(testing::make_input(k.dtype, k.n, r, 11));
    std::vector<uint8_t> buf = in[me];
    ASSERT_TRUE(run_and_wait(pg->all_reduce(Buffer{buf.data(), k.n, k.dtype}, k.op)).ok());
    EXPECT_EQ(testing::check_reduction(k.dtype, k.op, in, 0, buf.data(), k.n), "");
  }
  // reduce_scatter.
  {
    const int64_t n = 7;
    in.clear();
    for (int r = 0; r < P; ++r) in.push_back(testing::make_input(DType::kF32, n * P, r, 12));
    std::vector<float> out(n);
    ASSERT_TRUE(run_and_wait(pg->reduce_scatter(Buffer::cpu(out.data(), n),
                                                Buffer{in[me].data(), n * P, DType::kF32},
                                                ReduceOp::kSum)).ok());
    EXPECT_EQ(testing::check_reduction(DType::kF32, ReduceOp::kSum, in, n * me, out.data(), n), "");
  }
  // all_gather.
  {
    const int64_t n = 100001;
    std::vector<int64_t> mine(n), out(n * P, -1);
    for (int64_t i = 0; i < n; ++i) mine[i] = me * n + i;
    ASSERT_TRUE(run_and_wait(pg->all_gather(Buffer::cpu(out.data(), n * P), Buffer::cpu(mine.data(), n))).ok());
    for (int64_t i = 0; i < n * P; ++i) ASSERT_EQ(out[i], i);
  }
  // all_to_all.
  {
    const int64_t block = 3;
    std::vector<int64_t> send(block * P), recv(block * P, -1);
    for (int j = 0; j < P; ++j) {
      for (int64_t k = 0; k < block; ++k) send[j * block + k] = me * 100 + j * 10 + k;
    }
    ASSERT_TRUE(run_and_wait(pg->all_to_all(Buffer::cpu(recv.data(), block * P),
                                            Buffer::cpu(send.data(), block * P))).ok());
    for (int r = 0; r < P; ++r) {
      for (int64_t k = 0; k < block; ++k) EXPECT_EQ(recv[r * block + k], r * 100 + me * 10 + k);
    }
  }
  // broadcast from the last rank.
  {
    std::vector<float> buf(5000, me == P - 1 ? 3.5f : 0.0f);
    ASSERT_TRUE(run_and_wait(pg->broadcast(Buffer::cpu(buf.data(), 5000), P - 1)).ok());
    for (float v : buf) ASSERT_EQ(v, 3.5f);
  }
  // batched send/recv around the ring, then a barrier.
  {
    const int next = (me + 1) % P, prev = (me + P - 1) % P;
    std::vector<int32_t> out(70000, me), got(70000, -1);
    const std::vector<P2POp> ops = {{P2POp::Kind::kSend, Buffer::cpu(out.data(), 70000), next},
                                    {P2POp::Kind::kRecv, Buffer::cpu(got.data(), 70000), prev}};
    ASSERT_TRUE(run_and_wait(pg->batch_send_recv(ops)).ok());
    for (int32_t v : got) ASSERT_EQ(v, prev);
    ASSERT_TRUE(run_and_wait(pg->barrier()).ok());
  }
}

// Rank 1 joins the group but never the all_reduce; rank 0 must time out.
void child_absent_peer(const ChildConfig& c) {
  std::shared_ptr<Store> store;
  auto pg = child_group(c, &store);
  ASSERT_NE(pg, nullptr);
  if (c.rank == 0) {
    std::vector<float> buf(10, 1.0f);
    CollectiveOptions o;
    o.timeout = absl::Milliseconds(300);
    auto w = pg->all_reduce(Buffer::cpu(buf.data(), 10), ReduceOp::kSum, o);
    ASSERT_TRUE(w.ok());
    absl::Status s = (*w)->wait(absl::Seconds(20));
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_NE(s.message().find("all_reduce #0"), std::string::npos) << s;
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
    EXPECT_NE(s.message().find("timed out after 300ms"), std::string::npos) << s;
    // The group is unusable afterwards, and says why.
    auto again = pg->barrier();
    ASSERT_TRUE(again.ok());
    absl::Status s2 = (*again)->wait(absl::Seconds(20));
    EXPECT_TRUE(absl::IsFailedPrecondition(s2)) << s2;
    EXPECT_NE(s2.message().find("earlier failure"), std::string::npos) << s2;
    ASSERT_TRUE(store->set("rank0_done", "1").ok());
  } else {
    ASSERT_TRUE(store->get("rank0_done").ok());
  }
}

// Rank 1 exits right after joining; rank 0's all_reduce must fail fast.
void child_dead_peer(const ChildConfig& c) {
  auto pg = child_group(c, nullptr);
  ASSERT_NE(pg, nullptr);
  if (c.rank == 1) _exit(0);
  std::vector<float> buf(1 << 20, 1.0f);
  const absl::Time start = absl::Now();
  auto w = pg->all_reduce(Buffer::cpu(buf.data(), buf.size()), ReduceOp::kSum);
  ASSERT_TRUE(w.ok());
  absl::Status s = (*w)->wait(absl::Seconds(30));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "noticed only after " << (absl::Now() - start);
}

TEST(MultiProcessChild, Run) {
  auto c = child_config();
  if (!c) GTEST_SKIP() << "runs only as a child of the tests below";
  if (c->scenario == "collectives") child_collectives(*c);
  if (c->scenario == "absent") child_absent_peer(*c);
  if (c->scenario == "dead") child_dead_peer(*c);
}

// Parent: serve the store, start `world` children, expect every one to pass.
void run_children(const std::string& scenario, TransportKind transport, int world) {
  testing::run_rank_processes("MultiProcessChild.Run", scenario, world,
                              {{"COMM_TEST_TRANSPORT", transport_kind_name(transport)}},
                              absl::Seconds(50),
                              absl::StrCat(scenario, " over ", transport_kind_name(transport)));
}

TEST(MultiProcessTest, CollectivesOverShm) {
  for (int world : {2, 3, 4}) run_children("collectives", TransportKind::kShm, world);
}

TEST(MultiProcessTest, CollectivesOverTcp) {
  for (int world : {2, 3}) run_children("collectives", TransportKind::kTcp, world);
}

TEST(MultiProcessTest, AbsentPeerTimesOut) {
  run_children("absent", TransportKind::kShm, 2);
  run_children("absent", TransportKind::kTcp, 2);
}

TEST(MultiProcessTest, DeadPeerIsNoticed) {
  run_children("dead", TransportKind::kShm, 2);
  run_children("dead", TransportKind::kTcp, 2);
}

}  // namespace
}  // namespace colossal::comm
