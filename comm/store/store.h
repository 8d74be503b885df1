// colossal::comm — the rendezvous key-value store.
//
// Ranks find each other through a Store: a small key-value table every rank
// can reach (TcpStore in comm/store/tcp_store.h, served by rank 0 at
// MASTER_ADDR:MASTER_PORT, as torch.distributed's TCPStore). Process groups
// publish addresses, shared-memory names and NCCL unique ids in it; barrier()
// below synchronises ranks on it. Values are byte strings (binary-safe).
//
//   COLOSSAL_ASSIGN_OR_RETURN(auto store, TcpStore::create(options));
//   COLOSSAL_RETURN_IF_ERROR(store->set("rank0/address", "10.0.0.1:4000"));
//   COLOSSAL_ASSIGN_OR_RETURN(std::string a, store->get("rank0/address"));  // waits for it
//   COLOSSAL_ASSIGN_OR_RETURN(int64_t n, store->add("joined", 1));          // atomic counter
//   COLOSSAL_RETURN_IF_ERROR(barrier(*store, "init", world_size, absl::Seconds(60)));
//
// Contracts shared by every Store:
//   * get() and wait() block until the keys exist or the timeout passes; a
//     timeout is DeadlineExceededError naming the store's address and the
//     missing keys. Other failures (the server went away) are UnavailableError.
//   * add() treats a missing key as 0 and stores the result as its decimal
//     text, so get() of a counter returns e.g. "3". add() on a key holding
//     something else is InvalidArgumentError.
//   * compare_set(key, expected, desired) sets `desired` when the key holds
//     `expected`, or when it is missing and `expected` is empty, and returns
//     the value the key holds afterwards (torch's compare_set).
//   * All methods are thread-safe.
#ifndef COLOSSAL_COMM_STORE_STORE_H_
#define COLOSSAL_COMM_STORE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace colossal::comm {

class Store {
 public:
  virtual ~Store() = default;

  virtual absl::Status set(absl::string_view key, absl::string_view value) = 0;
  // The value of `key`, waiting up to timeout() for it to be set.
  virtual absl::StatusOr<std::string> get(absl::string_view key) = 0;
  // Adds `delta` to the integer at `key` (0 when missing); returns the new value.
  virtual absl::StatusOr<int64_t> add(absl::string_view key, int64_t delta) = 0;
  virtual absl::StatusOr<std::string> compare_set(absl::string_view key, absl::string_view expected,
                                                  absl::string_view desired) = 0;
  // Waits until every key exists, up to `timeout`.
  virtual absl::Status wait(absl::Span<const std::string> keys, absl::Duration timeout) = 0;
  absl::Status wait(absl::Span<const std::string> keys) { return wait(keys, timeout()); }
  // Whether every key exists, without waiting.
  virtual absl::StatusOr<bool> check(absl::Span<const std::string> keys) = 0;
  // Removes `key`; returns whether it existed.
  virtual absl::StatusOr<bool> delete_key(absl::string_view key) = 0;
  // The number of keys in the whole store (all prefixes).
  virtual absl::StatusOr<int64_t> num_keys() = 0;

  // The default wait of get() and wait().
  virtual absl::Duration timeout() const = 0;
  virtual void set_timeout(absl::Duration timeout) = 0;
  // Names the store for messages: "TCP store 127.0.0.1:29500".
  virtual std::string describe() const = 0;
};

// A view of `base` that puts "prefix/" before every key, so independent users
// (process groups, subgroups) share one store without collisions. Shares
// ownership of `base`; timeouts are the base store's.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  absl::Status set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> get(absl::string_view key) override;
  absl::StatusOr<int64_t> add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> compare_set(absl::string_view key, absl::string_view expected,
                                          absl::string_view desired) override;
  absl::Status wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  using Store::wait;
  absl::StatusOr<bool> check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> delete_key(absl::string_view key) override;
  absl::StatusOr<int64_t> num_keys() override;
  absl::Duration timeout() const override;
  void set_timeout(absl::Duration timeout) override;
  std::string describe() const override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string full(absl::string_view key) const;
  std::vector<std::string> full(absl::Span<const std::string> keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// Blocks until `world_size` callers have entered the barrier `name`, or
// `timeout` passes (DeadlineExceededError saying how many of world_size
// arrived). Each barrier name is for one use: pass a fresh name (e.g. with a
// counter) every time. Keys used: "<name>/arrived" and "<name>/done".
absl::Status barrier(Store& store, absl::string_view name, int world_size, absl::Duration timeout);

// One round of an exchange among `size` ranks: each posts `value` under
// "<prefix><round>/<rank>" and reads every rank's, waiting up to `timeout`.
// Every rank makes the rounds of one prefix in the same order. On a timeout
// `values` is empty and `missing` lists the ranks that never posted (a rank
// that skipped the round, or waits elsewhere). This rank's key of round - 1
// goes: every rank has read it once this round's keys are all there.
// Errors: the store's (a timeout with no rank missing among them).
struct ExchangeRound {
  std::vector<std::string> values;  // by rank
  std::vector<int> missing;
};
absl::StatusOr<ExchangeRound> exchange_round(Store& store, absl::string_view prefix, int64_t round,
                                             int rank, int size, absl::string_view value,
                                             absl::Duration timeout);

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_STORE_STORE_H_
