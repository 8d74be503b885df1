// Ranks as threads for comm/ tests: a loopback TCP store and a runner.
//
//   auto master = testing::loopback_store();           // 127.0.0.1, ephemeral port
//   testing::run_ranks(4, [&](int rank) {
//     std::shared_ptr<Store> store = testing::store_client(master->port());
//     ...
//   });
#ifndef COLOSSAL_COMM_TESTING_RANKS_H_
#define COLOSSAL_COMM_TESTING_RANKS_H_

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "comm/store/tcp_store.h"

namespace colossal::comm::testing {

// A master store on the loopback only (never another interface).
inline std::shared_ptr<TcpStore> loopback_store(absl::Duration timeout = absl::Seconds(30)) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.listen_address = "127.0.0.1";
  o.port = 0;
  o.is_master = true;
  o.timeout = timeout;
  auto s = TcpStore::create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::shared_ptr<TcpStore>(std::move(*s)) : nullptr;
}

// A client of the loopback store at `port`.
inline std::shared_ptr<TcpStore> store_client(int port,
                                              absl::Duration timeout = absl::Seconds(30)) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = timeout;
  auto s = TcpStore::create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::shared_ptr<TcpStore>(std::move(*s)) : nullptr;
}

// Runs fn(rank) for rank 0..size-1, each on its own thread, and joins them.
inline void run_ranks(int size, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

}  // namespace colossal::comm::testing

#endif  // COLOSSAL_COMM_TESTING_RANKS_H_
