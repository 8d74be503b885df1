// Every collective of the builtin backend x every transport (in-process,
// shared memory, TCP on 127.0.0.1) x world sizes 1-4, with ranks as threads,
// on odd lengths (1, 7, 1000003 elements) and float32 / bfloat16 / int64,
// against serial references (comm/testing/reference.h states the tolerance:
// bitwise for max/min and integers, a bound for float sums).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/builtin/process_group_builtin.h"
#include "comm/testing/ranks.h"
#include "comm/testing/reference.h"

namespace colossal::comm {
namespace {

using testing::check_bytes;
using testing::check_reduction;
using testing::make_input;

constexpr int64_t kLarge = 1000003;

class CollectivesTest : public ::testing::TestWithParam<std::tuple<TransportKind, int>> {
 protected:
  TransportKind transport() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }

  // Runs body(pg) on every rank (threads), each with its own group.
  void run(const std::function<void(ProcessGroup&)>& body) {
    auto master = testing::loopback_store();
    ASSERT_NE(master, nullptr);
    testing::run_ranks(world(), [&](int rank) {
      auto store = testing::store_client(master->port());
      BuiltinOptions o;
      o.transport = transport();
      o.timeout = absl::Seconds(60);
      o.tcp.address = "127.0.0.1";
      auto pg = ProcessGroupBuiltin::create(store, rank, world(), o);
      ASSERT_TRUE(pg.ok()) << pg.status();
      body(**pg);
    });
  }
};

void wait_ok(absl::StatusOr<WorkPtr> w, const std::string& what) {
  ASSERT_TRUE(w.ok()) << what << ": " << w.status();
  absl::Status s = (*w)->wait(absl::Seconds(60));
  ASSERT_TRUE(s.ok()) << what << ": " << s;
}

std::vector<std::vector<uint8_t>> all_inputs(DType dtype, int64_t count, int world, uint32_t seed) {
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < world; ++r) in.push_back(make_input(dtype, count, r, seed));
  return in;
}

struct ReduceCase {
  DType dtype;
  ReduceOp op;
  int64_t count;
};

std::vector<ReduceCase> reduce_cases() {
  std::vector<ReduceCase> cases;
  for (int64_t count : {1, 7}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                          ReduceOp::kProd}) {
        if (op == ReduceOp::kAvg && dtype == DType::kI64) continue;
        cases.push_back({dtype, op, count});
      }
    }
  }
  cases.push_back({DType::kF32, ReduceOp::kSum, kLarge});
  cases.push_back({DType::kBF16, ReduceOp::kAvg, kLarge});
  cases.push_back({DType::kI64, ReduceOp::kMax, kLarge});
  return cases;
}

std::string name_of(const ReduceCase& c) {
  return absl::StrCat(reduce_op_name(c.op), " ", core::dtype_name(c.dtype), " x ", c.count);
}

TEST_P(CollectivesTest, AllReduce) {
  run([&](ProcessGroup& pg) {
    uint32_t seed = 1;
    for (const ReduceCase& c : reduce_cases()) {
      auto in = all_inputs(c.dtype, c.count, pg.size(), seed++);
      std::vector<uint8_t> buf = in[pg.rank()];
      wait_ok(pg.all_reduce(Buffer{buf.data(), c.count, c.dtype}, c.op), name_of(c));
      EXPECT_EQ(check_reduction(c.dtype, c.op, in, 0, buf.data(), c.count), "")
          << "all_reduce " << name_of(c) << " rank " << pg.rank();
    }
  });
}

// reduce: the root's buffer holds the reduction (this backend runs an
// all-reduce, which the contract allows).
TEST_P(CollectivesTest, Reduce) {
  run([&](ProcessGroup& pg) {
    uint32_t seed = 50;
    for (const ReduceCase& c : reduce_cases()) {
      const int root = (seed % pg.size());
      auto in = all_inputs(c.dtype, c.count, pg.size(), seed++);
      std::vector<uint8_t> buf = in[pg.rank()];
      wait_ok(pg.reduce(Buffer{buf.data(), c.count, c.dtype}, c.op, root), name_of(c));
      if (pg.rank() == root) {
        EXPECT_EQ(check_reduction(c.dtype, c.op, in, 0, buf.data(), c.count), "")
            << "reduce " << name_of(c) << " to root " << root;
      }
    }
  });
}

TEST_P(CollectivesTest, ReduceScatter) {
  run([&](ProcessGroup& pg) {
    uint32_t seed = 100;
    const int P = pg.size();
    for (const ReduceCase& c : reduce_cases()) {
      const int64_t n = c.count;  // per rank
      auto in = all_inputs(c.dtype, n * P, P, seed++);
      const size_t esz = core::dtype_size(c.dtype);
      std::vector<uint8_t> out(n * esz, 0xA5);
      wait_ok(pg.reduce_scatter(Buffer{out.data(), n, c.dtype},
                                Buffer{in[pg.rank()].data(), n * P, c.dtype}, c.op),
              name_of(c));
      EXPECT_EQ(check_reduction(c.dtype, c.op, in, n * pg.rank(), out.data(), n), "")
          << "reduce_scatter " << name_of(c) << " rank " << pg.rank();
      // In place: the output is this rank's slice of the input.
      if (n < kLarge) {
        std::vector<uint8_t> buf = in[pg.rank()];
        uint8_t* slice = buf.data() + n * esz * pg.rank();
        wait_ok(pg.reduce_scatter(Buffer{slice, n, c.dtype}, Buffer{buf.data(), n * P, c.dtype},
                                  c.op),
                name_of(c) + " in place");
        EXPECT_EQ(check_reduction(c.dtype, c.op, in, n * pg.rank(), slice, n), "")
            << "in-place reduce_scatter " << name_of(c);
      }
    }
  });
}

TEST_P(CollectivesTest, AllGather) {
  run([&](ProcessGroup& pg) {
    const int P = pg.size();
    uint32_t seed = 200;
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, kLarge}) {
        if (n == kLarge && dtype != DType::kBF16) continue;
        auto in = all_inputs(dtype, n, P, seed++);
        const size_t esz = core::dtype_size(dtype);
        std::vector<uint8_t> out(n * P * esz + 1, 0xA5);
        wait_ok(pg.all_gather(Buffer{out.data(), n * P, dtype}, Buffer{in[pg.rank()].data(), n, dtype}),
                "all_gather");
        for (int r = 0; r < P; ++r) {
          EXPECT_EQ(check_bytes(dtype, out.data() + r * n * esz, in[r].data(), n), "")
              << "all_gather block " << r << " n " << n;
        }
        // In place.
        std::vector<uint8_t> buf(n * P * esz, 0xA5);
        if (n > 0) std::memcpy(buf.data() + pg.rank() * n * esz, in[pg.rank()].data(), n * esz);
        wait_ok(pg.all_gather(Buffer{buf.data(), n * P, dtype},
                              Buffer{buf.data() + pg.rank() * n * esz, n, dtype}),
                "in-place all_gather");
        for (int r = 0; r < P; ++r) {
          EXPECT_EQ(check_bytes(dtype, buf.data() + r * n * esz, in[r].data(), n), "");
        }
      }
    }
  });
}

TEST_P(CollectivesTest, AllToAllEqualSplits) {
  run([&](ProcessGroup& pg) {
    const int P = pg.size();
    uint32_t seed = 300;
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
      for (int64_t block : {int64_t{1}, int64_t{7}, kLarge / 4}) {
        auto in = all_inputs(dtype, block * P, P, seed++);
        const size_t esz = core::dtype_size(dtype);
        std::vector<uint8_t> out(block * P * esz, 0xA5);
        wait_ok(pg.all_to_all(Buffer{out.data(), block * P, dtype},
                              Buffer{in[pg.rank()].data(), block * P, dtype}),
                "all_to_all");
        for (int r = 0; r < P; ++r) {
          // Block r of my output is block `rank` of rank r's input.
          EXPECT_EQ(check_bytes(dtype, out.data() + r * block * esz,
                                in[r].data() + pg.rank() * block * esz, block),
                    "")
              << "all_to_all from rank " << r;
        }
      }
    }
  });
}

// Rank r sends split(r, j) elements to rank j: some zero, all different.
int64_t split(int from, int to) { return (from * 7 + to * 3) % 5; }

TEST_P(CollectivesTest, AllToAllVariableSplits) {
  run([&](ProcessGroup& pg) {
    const int P = pg.size(), me = pg.rank();
    const DType dtype = DType::kI64;
    std::vector<int64_t> send_counts(P), recv_counts(P);
    int64_t send_total = 0, recv_total = 0;
    for (int j = 0; j < P; ++j) {
      send_counts[j] = split(me, j);
      recv_counts[j] = split(j, me);
      send_total += send_counts[j];
      recv_total += recv_counts[j];
    }
    // Element k of the block from r to j is r * 1000 + j * 100 + k.
    std::vector<int64_t> in, out(recv_total, -1);
    for (int j = 0; j < P; ++j) {
      for (int64_t k = 0; k < send_counts[j]; ++k) in.push_back(me * 1000 + j * 100 + k);
    }
    wait_ok(pg.all_to_all(Buffer::cpu(out.data(), recv_total), recv_counts,
                          Buffer::cpu(in.data(), send_total), send_counts),
            "all_to_all_v");
    size_t at = 0;
    for (int r = 0; r < P; ++r) {
      for (int64_t k = 0; k < recv_counts[r]; ++k) {
        EXPECT_EQ(out[at++], r * 1000 + me * 100 + k) << "from rank " << r << " element " << k;
      }
    }
    (void)dtype;
  });
}

TEST_P(CollectivesTest, Broadcast) {
  run([&](ProcessGroup& pg) {
    const int P = pg.size();
    uint32_t seed = 400;
    for (int root : {0, P - 1}) {
      for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
        for (int64_t n : {int64_t{1}, int64_t{7}, kLarge}) {
          if (n == kLarge && dtype != DType::kF32) continue;
          auto want = make_input(dtype, n, root, seed++);
          std::vector<uint8_t> buf =
              pg.rank() == root ? want : std::vector<uint8_t>(want.size(), 0xA5);
          wait_ok(pg.broadcast(Buffer{buf.data(), n, dtype}, root), "broadcast");
          EXPECT_EQ(check_bytes(dtype, buf.data(), want.data(), n), "")
              << "broadcast from " << root << " n " << n;
        }
      }
    }
  });
}

TEST_P(CollectivesTest, SendRecvAroundTheRing) {
  run([&](ProcessGroup& pg) {
    const int P = pg.size(), me = pg.rank();
    if (P == 1) return;
    const int next = (me + 1) % P, prev = (me + P - 1) % P;
    for (int64_t n : {int64_t{1}, int64_t{7}, kLarge}) {
      auto mine = make_input(DType::kF32, n, me, 500);
      auto want = make_input(DType::kF32, n, prev, 500);
      std::vector<uint8_t> got(want.size(), 0xA5);
      // Separate calls, ordered so nobody waits for a send that is never received:
      // even ranks send first, odd ranks receive first (odd P: rank P-1 receives first).
      const bool send_first = me % 2 == 0 && !(P % 2 == 1 && me == P - 1);
      if (send_first) {
        wait_ok(pg.send(Buffer{mine.data(), n, DType::kF32}, next), "send");
        wait_ok(pg.recv(Buffer{got.data(), n, DType::kF32}, prev), "recv");
      } else {
        wait_ok(pg.recv(Buffer{got.data(), n, DType::kF32}, prev), "recv");
        wait_ok(pg.send(Buffer{mine.data(), n, DType::kF32}, next), "send");
      }
      EXPECT_EQ(check_bytes(DType::kF32, got.data(), want.data(), n), "");
      // Both directions at once in one batch.
      std::vector<uint8_t> from_next(want.size(), 0xA5), from_prev(want.size(), 0xA5);
      const std::vector<P2POp> ops = {
          {P2POp::Kind::kSend, Buffer{mine.data(), n, DType::kF32}, next},
          {P2POp::Kind::kSend, Buffer{mine.data(), n, DType::kF32}, prev},
          {P2POp::Kind::kRecv, Buffer{from_prev.data(), n, DType::kF32}, prev},
          {P2POp::Kind::kRecv, Buffer{from_next.data(), n, DType::kF32}, next},
      };
      wait_ok(pg.batch_send_recv(ops), "batch_send_recv");
      EXPECT_EQ(check_bytes(DType::kF32, from_prev.data(), want.data(), n), "");
      auto want_next = make_input(DType::kF32, n, next, 500);
      EXPECT_EQ(check_bytes(DType::kF32, from_next.data(), want_next.data(), n), "");
    }
  });
}

TEST_P(CollectivesTest, BarrierWaitsForEveryone) {
  std::atomic<int> arrived{0};
  run([&](ProcessGroup& pg) {
    for (int round = 1; round <= 3; ++round) {
      absl::SleepFor(absl::Milliseconds(10 * pg.rank()));
      arrived.fetch_add(1);
      wait_ok(pg.barrier(), "barrier");
      EXPECT_GE(arrived.load(), round * pg.size()) << "left the barrier early";
      wait_ok(pg.barrier(), "second barrier");  // nobody starts the next round early
    }
  });
}

TEST_P(CollectivesTest, ManyOperationsInFlight) {
  // Issue everything first, then wait: the worker runs them in order.
  run([&](ProcessGroup& pg) {
    const int P = pg.size();
    constexpr int kOps = 20;
    std::vector<std::vector<float>> bufs(kOps, std::vector<float>(33));
    std::vector<WorkPtr> works;
    for (int i = 0; i < kOps; ++i) {
      for (size_t k = 0; k < bufs[i].size(); ++k) bufs[i][k] = static_cast<float>(pg.rank() + i + k);
      auto w = pg.all_reduce(Buffer::cpu(bufs[i].data(), 33), ReduceOp::kSum);
      ASSERT_TRUE(w.ok());
      works.push_back(*w);
    }
    for (int i = 0; i < kOps; ++i) {
      ASSERT_TRUE(works[i]->wait(absl::Seconds(60)).ok());
      EXPECT_TRUE(works[i]->is_completed());
      for (size_t k = 0; k < 33; ++k) {
        EXPECT_EQ(bufs[i][k], static_cast<float>(P * (P - 1) / 2 + P * (i + k)));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    AllTransports, CollectivesTest,
    ::testing::Combine(::testing::Values(TransportKind::kInproc, TransportKind::kShm,
                                         TransportKind::kTcp),
                       ::testing::Values(1, 2, 3, 4)),
    [](const ::testing::TestParamInfo<std::tuple<TransportKind, int>>& info) {
      return absl::StrCat(transport_kind_name(std::get<0>(info.param)), "_world",
                          std::get<1>(info.param));
    });

}  // namespace
}  // namespace colossal::comm
