// Each transport on its own (ranks as threads): bytes arrive in order and
// intact through rings much smaller than the messages, wake() interrupts a
// wait, and run_transfers reports timeouts and mismatched headers clearly.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/builtin/exchange.h"
#include "comm/builtin/inproc_transport.h"
#include "comm/builtin/shm_transport.h"
#include "comm/builtin/tcp_transport.h"
#include "comm/store/store.h"
#include "comm/testing/ranks.h"

namespace colossal::comm::builtin {
namespace {

enum class Kind { kInproc, kShm, kTcp };

std::unique_ptr<Transport> make(Kind kind, Store& store, int rank, int size) {
  absl::StatusOr<std::unique_ptr<Transport>> t;
  switch (kind) {
    case Kind::kInproc: {
      InprocTransportOptions o;
      o.capacity = 1000;  // odd and tiny: wrap-around everywhere
      auto name = store.compare_set("name", "", absl::StrCat("t", reinterpret_cast<uintptr_t>(&store)));
      EXPECT_TRUE(name.ok());
      auto r = InprocTransport::create(*name, rank, size, o);
      if (r.ok()) t = std::unique_ptr<Transport>(std::move(*r)); else t = r.status();
      EXPECT_TRUE(barrier(store, "joined", size, absl::Seconds(30)).ok());
      break;
    }
    case Kind::kShm: {
      ShmTransportOptions o;
      o.capacity = 4096;
      auto r = ShmTransport::create(store, rank, size, o);
      if (r.ok()) t = std::unique_ptr<Transport>(std::move(*r)); else t = r.status();
      break;
    }
    case Kind::kTcp: {
      TcpTransportOptions o;
      o.address = "127.0.0.1";
      auto r = TcpTransport::create(store, rank, size, o);
      if (r.ok()) t = std::unique_ptr<Transport>(std::move(*r)); else t = r.status();
      break;
    }
  }
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

class TransportTest : public ::testing::TestWithParam<Kind> {};

std::vector<char> pattern(int from, int to, int msg, size_t bytes) {
  std::vector<char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<char>(from * 31 + to * 17 + msg * 7 + i * 13);
  return v;
}

TEST_P(TransportTest, AllPairsManyMessages) {
  constexpr int kSize = 3;
  const std::vector<size_t> sizes = {0, 1, 999, 1000, 1001, 4096, 70001, 3};
  auto master = testing::loopback_store();
  testing::run_ranks(kSize, [&](int rank) {
    auto store = testing::store_client(master->port());
    auto t = make(GetParam(), *store, rank, kSize);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->rank(), rank);
    EXPECT_EQ(t->size(), kSize);
    OpContext ctx;
    ctx.wire_op = 1;
    ctx.description = "test exchange";
    ctx.deadline = absl::Now() + absl::Seconds(30);
    std::vector<std::vector<char>> out, in;
    std::vector<Transfer> transfers;
    for (int p = 0; p < kSize; ++p) {
      if (p == rank) continue;
      for (size_t m = 0; m < sizes.size(); ++m) {
        out.push_back(pattern(rank, p, m, sizes[m]));
        in.push_back(std::vector<char>(sizes[m], 0));
      }
    }
    size_t k = 0;
    for (int p = 0; p < kSize; ++p) {
      if (p == rank) continue;
      for (size_t m = 0; m < sizes.size(); ++m, ++k) {
        transfers.push_back(Transfer::send(p, out[k].data(), sizes[m]));
        transfers.push_back(Transfer::recv(p, in[k].data(), sizes[m]));
      }
    }
    absl::Status s = run_transfers(*t, ctx, absl::MakeSpan(transfers));
    ASSERT_TRUE(s.ok()) << s;
    k = 0;
    for (int p = 0; p < kSize; ++p) {
      if (p == rank) continue;
      for (size_t m = 0; m < sizes.size(); ++m, ++k) {
        EXPECT_EQ(in[k], pattern(p, rank, m, sizes[m])) << "from " << p << " message " << m;
      }
    }
  });
}

TEST_P(TransportTest, SegmentsAreDeliveredInOrder) {
  auto master = testing::loopback_store();
  testing::run_ranks(2, [&](int rank) {
    auto store = testing::store_client(master->port());
    auto t = make(GetParam(), *store, rank, 2);
    ASSERT_NE(t, nullptr);
    OpContext ctx;
    ctx.description = "segments";
    ctx.deadline = absl::Now() + absl::Seconds(30);
    const size_t bytes = 100003;
    std::vector<char> data = pattern(0, 1, 0, bytes);
    if (rank == 0) {
      Transfer tr = Transfer::send(1, data.data(), bytes);
      ASSERT_TRUE(run_transfers(*t, ctx, absl::MakeSpan(&tr, 1)).ok());
    } else {
      std::vector<char> got(bytes);
      size_t next = 0;
      Transfer tr = Transfer::recv(0, got.data(), bytes);
      tr.segment = 1024;
      tr.on_data = [&](size_t begin, size_t end) {
        EXPECT_EQ(begin, next);
        EXPECT_TRUE(end == bytes || (end - begin) % 1024 == 0);
        next = end;
        return absl::OkStatus();
      };
      ASSERT_TRUE(run_transfers(*t, ctx, absl::MakeSpan(&tr, 1)).ok());
      EXPECT_EQ(next, bytes);
      EXPECT_EQ(got, data);
    }
  });
}

TEST_P(TransportTest, TimeoutNamesPeerAndProgress) {
  auto master = testing::loopback_store();
  testing::run_ranks(2, [&](int rank) {
    auto store = testing::store_client(master->port());
    auto t = make(GetParam(), *store, rank, 2);
    ASSERT_NE(t, nullptr);
    if (rank == 0) {
      OpContext ctx;
      ctx.description = "all_reduce #3 (test)";
      ctx.timeout = absl::Milliseconds(100);
      ctx.deadline = absl::Now() + ctx.timeout;
      char buf[10];
      Transfer tr = Transfer::recv(1, buf, sizeof(buf));
      const absl::Time start = absl::Now();
      absl::Status s = run_transfers(*t, ctx, absl::MakeSpan(&tr, 1));
      EXPECT_LT(absl::Now() - start, absl::Seconds(5));
      EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
      EXPECT_NE(s.message().find("all_reduce #3"), std::string::npos) << s;
      EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
      EXPECT_NE(s.message().find("0 of 10 bytes"), std::string::npos) << s;
    }
    EXPECT_TRUE(barrier(*store, "done", 2, absl::Seconds(30)).ok());
  });
}

TEST_P(TransportTest, HeaderMismatchIsReported) {
  auto master = testing::loopback_store();
  testing::run_ranks(2, [&](int rank) {
    auto store = testing::store_client(master->port());
    auto t = make(GetParam(), *store, rank, 2);
    ASSERT_NE(t, nullptr);
    OpContext ctx;
    ctx.wire_op = 0;  // all_reduce
    ctx.seq = 5;
    ctx.description = "all_reduce #5";
    ctx.deadline = absl::Now() + absl::Seconds(10);
    std::vector<char> buf(rank == 0 ? 40 : 80);
    Transfer tr[2] = {Transfer::send(1 - rank, buf.data(), buf.size()),
                      Transfer::recv(1 - rank, buf.data(), buf.size())};
    absl::Status s = run_transfers(*t, ctx, absl::MakeSpan(tr));
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("different collectives, sizes or tags"), std::string::npos) << s;
    EXPECT_TRUE(barrier(*store, "done", 2, absl::Seconds(30)).ok());
  });
}

TEST_P(TransportTest, WakeInterruptsWaitAndAbortCancels) {
  auto master = testing::loopback_store();
  testing::run_ranks(2, [&](int rank) {
    auto store = testing::store_client(master->port());
    auto t = make(GetParam(), *store, rank, 2);
    ASSERT_NE(t, nullptr);
    if (rank == 0) {
      std::atomic<bool> abort{false};
      OpContext ctx;
      ctx.description = "broadcast #0";
      ctx.deadline = absl::Now() + absl::Seconds(30);
      ctx.abort = &abort;
      std::thread stopper([&] {
        absl::SleepFor(absl::Milliseconds(50));
        abort.store(true);
        t->wake();
      });
      char buf[4];
      Transfer tr = Transfer::recv(1, buf, 4);
      const absl::Time start = absl::Now();
      absl::Status s = run_transfers(*t, ctx, absl::MakeSpan(&tr, 1));
      stopper.join();
      EXPECT_TRUE(absl::IsCancelled(s)) << s;
      EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    }
    EXPECT_TRUE(barrier(*store, "done", 2, absl::Seconds(30)).ok());
  });
}

INSTANTIATE_TEST_SUITE_P(Each, TransportTest,
                         ::testing::Values(Kind::kInproc, Kind::kShm, Kind::kTcp),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           switch (info.param) {
                             case Kind::kInproc: return std::string("inproc");
                             case Kind::kShm: return std::string("shm");
                             case Kind::kTcp: return std::string("tcp");
                           }
                           return std::string("unknown");
                         });

TEST(ShmTransportTest, DefaultCapacityShrinksForLargeGroups) {
  auto master = testing::loopback_store();
  ShmTransportOptions o;
  auto t = ShmTransport::create(*master, 0, 1, o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->capacity(), size_t{1} << 20);
}

TEST(ShmTransportTest, MissingPeerTimesOutNamingTheKey) {
  auto master = testing::loopback_store(absl::Milliseconds(200));
  auto t = ShmTransport::create(*master, 0, 2, {});
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(t.status())) << t.status();
  EXPECT_NE(t.status().message().find("shm/1"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("rank 1"), std::string::npos) << t.status();
}

TEST(TcpTransportTest, MissingPeerTimesOutNamingTheRank) {
  auto master = testing::loopback_store(absl::Milliseconds(200));
  TcpTransportOptions o;
  o.address = "127.0.0.1";
  auto t = TcpTransport::create(*master, 1, 2, o);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(t.status())) << t.status();
  EXPECT_NE(t.status().message().find("tcp/0"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace colossal::comm::builtin
