// TcpStore on the loopback (127.0.0.1, ephemeral ports): every operation,
// blocking waits released by another client, timeouts whose messages name the
// address and the keys, PrefixStore, barrier, and a server that goes away.
#include "comm/store/tcp_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "comm/store/store.h"

namespace colossal::comm {
namespace {

TcpStoreOptions master_options() {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.listen_address = "127.0.0.1";
  o.port = 0;
  o.is_master = true;
  o.timeout = absl::Seconds(20);
  return o;
}

std::unique_ptr<TcpStore> client_of(const TcpStore& master, absl::Duration timeout = absl::Seconds(20)) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = master.port();
  o.timeout = timeout;
  auto s = TcpStore::create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(TcpStoreTest, SetGetBetweenClients) {
  auto master = TcpStore::create(master_options());
  ASSERT_TRUE(master.ok()) << master.status();
  EXPECT_GT((*master)->port(), 0);
  auto worker = client_of(**master);
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(worker->set("k", "v").ok());
  auto v = (*master)->get("k");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");
  // Binary-safe values, and overwrite.
  const std::string binary("a\0b\xff", 4);
  ASSERT_TRUE((*master)->set("k", binary).ok());
  EXPECT_EQ(*worker->get("k"), binary);
}

// Two jobs given one port: a client of another job is refused, naming both
// ids, instead of joining this job's rendezvous.
TEST(TcpStoreTest, AClientOfAnotherJobIsRefused) {
  TcpStoreOptions m = master_options();
  m.job_id = "job-a";
  auto master = TcpStore::create(m);
  ASSERT_TRUE(master.ok()) << master.status();
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = (*master)->port();
  o.timeout = absl::Seconds(20);
  o.job_id = "job-a";
  EXPECT_TRUE(TcpStore::create(o).ok());
  o.job_id = "";  // no id: no check
  EXPECT_TRUE(TcpStore::create(o).ok());
  o.job_id = "job-b";
  auto other = TcpStore::create(o);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("belongs to another job (job id 'job-a'; this process's is 'job-b')"),
            std::string::npos)
      << other.status();
  EXPECT_NE(other.status().message().find("--master_port"), std::string::npos) << other.status();
}

TEST(TcpStoreTest, GetWaitsForALaterSet) {
  auto master = TcpStore::create(master_options());
  ASSERT_TRUE(master.ok());
  auto worker = client_of(**master);
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(worker->set("late", "here").ok());
  });
  auto v = (*master)->get("late");
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "here");
}

TEST(TcpStoreTest, GetTimeoutNamesAddressAndKey) {
  auto master = TcpStore::create(master_options());
  ASSERT_TRUE(master.ok());
  (*master)->set_timeout(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  auto v = (*master)->get("never/set");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(v.status())) << v.status();
  const std::string msg(v.status().message());
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string((*master)->port())), std::string::npos) << msg;
  EXPECT_NE(msg.find("never/set"), std::string::npos) << msg;
  // The connection is still usable after a timeout.
  EXPECT_TRUE((*master)->set("after", "1").ok());
}

TEST(TcpStoreTest, AddCountsAndRejectsNonIntegers) {
  auto master = TcpStore::create(master_options());
  ASSERT_TRUE(master.ok());
  EXPECT_EQ(*(*master)->add("n", 5), 5);
  EXPECT_EQ(*(*master)->add("n", -2), 3);
  EXPECT_EQ(*(*master)->get("n"), "3");
  ASSERT_TRUE((*master)->set("text", "abc").ok());
  auto bad = (*master)->add("text", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find("text"), std::string::npos);
}

TEST(TcpStoreTest, ConcurrentAddsFromManyClients) {
  auto master = TcpStore::create(master_options());
  ASSERT_TRUE(master.ok());
  constexpr int kClients = 8, kAdds = 50;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&] {
      auto s = client_of(**master);
      for (int i = 0; i < kAdds; ++i) EXPECT_TRUE(s->add("counter", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*(*master)->add("counter", 0), kClients * kAdds);
}

TEST(TcpStoreTest, CompareSet) {
  auto master = TcpStore::create(master_options());
  ASSERT_TRUE(master.ok());
  TcpStore& s = **master;
  EXPECT_EQ(*s.compare_set("c", "x", "y"), "x");  // missing, expected non-empty: not set
  EXPECT_FALSE(*s.check({"c"}));
  EXPECT_EQ(*s.compare_set("c", "", "first"), "first");  // missing, expected empty: set
  EXPECT_EQ(*s.compare_set("c", "wrong", "second"), "first");
  EXPECT_EQ(*s.compare_set("c", "first", "second"), "second");
  EXPECT_EQ(*s.get("c"), "second");
}

TEST(TcpStoreTest, WaitCheckDeleteNumKeys) {
  auto master = TcpStore::create(master_options());
  ASSERT_TRUE(master.ok());
  TcpStore& s = **master;
  const std::vector<std::string> keys = {"a", "b"};
  EXPECT_FALSE(*s.check(keys));
  ASSERT_TRUE(s.set("a", "1").ok());
  absl::Status timed_out = s.wait(keys, absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(timed_out)) << timed_out;
  EXPECT_NE(timed_out.message().find("'b'"), std::string::npos) << timed_out;
  EXPECT_EQ(timed_out.message().find("'a'"), std::string::npos) << "only missing keys: " << timed_out;
  ASSERT_TRUE(s.set("b", "2").ok());
  EXPECT_TRUE(s.wait(keys, absl::Seconds(5)).ok());
  EXPECT_TRUE(*s.check(keys));
  EXPECT_EQ(*s.num_keys(), 2);
  EXPECT_TRUE(*s.delete_key("a"));
  EXPECT_FALSE(*s.delete_key("a"));
  EXPECT_EQ(*s.num_keys(), 1);
}

TEST(TcpStoreTest, PrefixStoreSeparatesNamespaces) {
  auto master = TcpStore::create(master_options());
  ASSERT_TRUE(master.ok());
  std::shared_ptr<Store> base = std::move(*master);
  PrefixStore a("group/a", base), b("group/b", base);
  ASSERT_TRUE(a.set("k", "from a").ok());
  ASSERT_TRUE(b.set("k", "from b").ok());
  EXPECT_EQ(*a.get("k"), "from a");
  EXPECT_EQ(*b.get("k"), "from b");
  EXPECT_EQ(*base->get("group/a/k"), "from a");
  EXPECT_EQ(*a.add("n", 2), 2);
  EXPECT_TRUE(a.wait({"k"}, absl::Seconds(1)).ok());
  EXPECT_NE(a.describe().find("group/a"), std::string::npos);
}

TEST(TcpStoreTest, BarrierReleasesAllAndTimesOutCounting) {
  auto master = TcpStore::create(master_options());
  ASSERT_TRUE(master.ok());
  constexpr int kWorld = 4;
  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&] {
      auto s = client_of(**master);
      if (barrier(*s, "b1", kWorld, absl::Seconds(20)).ok()) ++passed;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed.load(), kWorld);

  absl::Status lonely = barrier(**master, "b2", 3, absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(lonely)) << lonely;
  EXPECT_NE(lonely.message().find("1 of 3"), std::string::npos) << lonely;
}

TEST(TcpStoreTest, WaitForWorkers) {
  TcpStoreOptions o = master_options();
  // Reserve the port first so the workers know it before the master returns.
  auto server_probe = TcpStoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server_probe.ok());
  const int port = (*server_probe)->port();
  server_probe->reset();
  o.port = port;
  o.world_size = 3;
  o.wait_for_workers = true;
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i) {
    workers.emplace_back([port] {
      TcpStoreOptions w;
      w.port = port;
      w.world_size = 3;
      w.timeout = absl::Seconds(20);
      auto s = TcpStore::create(w);
      EXPECT_TRUE(s.ok()) << s.status();
      if (s.ok()) {
        EXPECT_TRUE((*s)->get("__colossal_store/all_joined").ok());
      }
    });
  }
  auto master = TcpStore::create(o);
  EXPECT_TRUE(master.ok()) << master.status();
  for (auto& t : workers) t.join();

  TcpStoreOptions alone = master_options();
  alone.world_size = 2;
  alone.wait_for_workers = true;
  alone.timeout = absl::Milliseconds(100);
  auto lonely = TcpStore::create(alone);
  EXPECT_TRUE(absl::IsDeadlineExceeded(lonely.status())) << lonely.status();
  EXPECT_NE(lonely.status().message().find("1 of 2"), std::string::npos) << lonely.status();
}

TEST(TcpStoreTest, UnreachableMasterTimesOutNamingAddress) {
  int port = 0;
  { auto probe = TcpStoreServer::start("127.0.0.1", 0); ASSERT_TRUE(probe.ok()); port = (*probe)->port(); }
  TcpStoreOptions o;
  o.port = port;
  o.timeout = absl::Milliseconds(200);
  auto s = TcpStore::create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
}

TEST(TcpStoreTest, ServerGoingAwayIsUnavailable) {
  auto master = TcpStore::create(master_options());
  ASSERT_TRUE(master.ok());
  auto worker = client_of(**master, absl::Milliseconds(300));
  ASSERT_TRUE(worker->set("x", "1").ok());
  master->reset();
  absl::Status s = worker->set("y", "2");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) << s;
}

// A second job's master on the port of a running one: Unavailable saying how
// to give it another port.
TEST(TcpStoreTest, PortInUseSaysHowToPickAnother) {
  auto first = TcpStore::create(master_options());
  ASSERT_TRUE(first.ok()) << first.status();
  TcpStoreOptions o = master_options();
  o.port = (*first)->port();
  auto second = TcpStore::create(o);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_NE(second.status().message().find("Address already in use"), std::string::npos) << second.status();
  EXPECT_NE(second.status().message().find("--master_port"), std::string::npos) << second.status();
}

TEST(TcpStoreTest, BadPortIsInvalidArgument) {
  TcpStoreOptions o;
  o.port = 0;
  auto s = TcpStore::create(o);
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("MASTER_PORT"), std::string::npos);
}

TEST(TcpStoreTest, ListensOnEveryInterfaceByDefault) {
  // The default listen address is the wildcard (torch's behaviour); we only
  // ever connect through the loopback.
  TcpStoreOptions o = master_options();
  o.listen_address = "";
  auto master = TcpStore::create(o);
  ASSERT_TRUE(master.ok()) << master.status();
  auto worker = client_of(**master);
  ASSERT_TRUE(worker->set("k", "v").ok());
  EXPECT_EQ(*(*master)->get("k"), "v");
}

}  // namespace
}  // namespace colossal::comm
