// colossal::comm — TcpStore: the rendezvous store served over TCP by rank 0.
//
// As torch.distributed's TCPStore: the master (rank 0, `is_master`) runs a
// TcpStoreServer in a background thread, listening on every interface at
// MASTER_PORT by default; every rank, the master included, is a client that
// connects to MASTER_ADDR:MASTER_PORT, retrying until `timeout` (the master may
// start later). Blocking waits (get, wait) are held by the server, so a client
// never polls; the server answers a timed-out wait with a timeout, and the
// client reports DeadlineExceededError naming the store address and the keys:
//   TCP store 127.0.0.1:29500: timed out after 30s waiting for key(s) 'shm/3'
//
//   TcpStoreOptions o;
//   o.host = "127.0.0.1";  o.port = 0;  o.is_master = true;   // tests: loopback, ephemeral
//   o.listen_address = "127.0.0.1";
//   COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> master, TcpStore::create(o));
//   o.is_master = false;  o.port = master->port();
//   COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> worker, TcpStore::create(o));
//   COLOSSAL_RETURN_IF_ERROR(worker->set("k", "v"));
//   master->get("k");  // "v"
//
// Threads: one TcpStore is one connection, and its requests are serialised; a
// blocking get()/wait() holds it until answered. A thread that waits for a key
// another thread of the same process will set needs its own TcpStore client.
//
// Lifetime: the master's store owns the server; destroying it disconnects
// every client, so the master should outlive the others' last use (end a run
// with a barrier). A TcpStoreServer can also run alone (a launcher, a test
// driving several processes).
#ifndef COLOSSAL_COMM_STORE_TCP_STORE_H_
#define COLOSSAL_COMM_STORE_TCP_STORE_H_

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/net/socket.h"
#include "comm/store/store.h"

namespace colossal::comm {

// The server: a single thread polling every connection. Holds the table.
class TcpStoreServer {
 public:
  // Starts listening on `listen_address` ("" = every interface, as torch;
  // "127.0.0.1" = loopback only) and `port` (0 = ephemeral; see port()).
  // Errors: the address cannot be bound (e.g. the port is in use).
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> start(const std::string& listen_address,
                                                               int port);
  ~TcpStoreServer();  // stops the thread and closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  const std::string& listen_address() const { return listen_address_; }

 private:
  class Loop;
  TcpStoreServer(std::string listen_address, int port, std::unique_ptr<Loop> loop);

  std::string listen_address_;
  int port_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

struct TcpStoreOptions {
  // Where clients connect: MASTER_ADDR (name or address).
  std::string host = "127.0.0.1";
  // MASTER_PORT. With is_master, 0 picks an ephemeral port (read port()).
  int port = 29500;
  // Whether this process runs the server (rank 0).
  bool is_master = false;
  // Master only: the address the server listens on. "" (the default, as
  // torch's TCPStore) is every interface; "127.0.0.1" keeps it on the loopback.
  std::string listen_address;
  // Default wait of get()/wait(), and how long connecting is retried.
  absl::Duration timeout = absl::Minutes(5);
  // The job this process belongs to (comm/launch/env.h's job id): the first
  // client to connect records it, and a client of another job is refused
  // (FailedPrecondition naming both ids), so two jobs given one port never
  // join each other's rendezvous. "" skips the check.
  std::string job_id;
  // With world_size > 0, every client counts itself in at creation and the
  // master's create() waits (up to `timeout`) until world_size have.
  int world_size = -1;
  bool wait_for_workers = false;
};

// A client of a TcpStoreServer (and, with is_master, its owner).
class TcpStore : public Store {
 public:
  // Errors: the master's address cannot be bound; the server cannot be
  // reached within `timeout`; workers did not join in time (wait_for_workers).
  static absl::StatusOr<std::unique_ptr<TcpStore>> create(const TcpStoreOptions& options);
  ~TcpStore() override;

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

  // The server's port (the ephemeral one when the master asked for 0).
  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  TcpStore(std::string host, int port, absl::Duration timeout,
           std::unique_ptr<TcpStoreServer> server);
  // Sends one request and returns the reply's payload. `server_wait` is how
  // long the server may hold the request (get/wait); `what` names the request
  // for messages.
  absl::StatusOr<std::string> call(const std::string& request, absl::Duration server_wait,
                                   absl::string_view what);
  // call() for a request whose reply is kOk and one integer (check, delete,
  // num_keys): that integer. `name` names the request in a malformed reply's
  // message.
  absl::StatusOr<int64_t> call_for_count(const std::string& request, absl::string_view what,
                                         absl::string_view name);
  absl::Status connect(absl::Time deadline);

  const std::string host_;
  const int port_;
  std::unique_ptr<TcpStoreServer> server_;  // master only
  mutable std::mutex mu_;
  absl::Duration timeout_;
  net::Fd fd_;  // closed when a request failed midway; reconnected on the next call
};

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_STORE_TCP_STORE_H_
