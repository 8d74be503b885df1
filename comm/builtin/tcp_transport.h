// colossal::comm::builtin — the TCP transport: ranks on different hosts.
//
// A full mesh of TCP connections, one per pair of ranks. Each rank listens on
// an ephemeral port of its address and publishes "host:port" in the store;
// a rank connects to every lower rank and accepts every higher one, and the
// first bytes on a connection (magic, rank, group nonce) say who is calling.
// Sockets are non-blocking with TCP_NODELAY; wait() is poll() on the peers'
// sockets plus an eventfd for wake().
//
// The address: `options.address` when set (tests use "127.0.0.1"), otherwise
// the address of this host's interface that routes toward
// `options.route_to` (MASTER_ADDR), which is where peers on other hosts can
// reach us. Only that address is listened on.
//
//   TcpTransportOptions o;  o.address = "127.0.0.1";
//   COLOSSAL_ASSIGN_OR_RETURN(auto t, TcpTransport::create(store, rank, size, o));
#ifndef COLOSSAL_COMM_BUILTIN_TCP_TRANSPORT_H_
#define COLOSSAL_COMM_BUILTIN_TCP_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/builtin/transport.h"
#include "comm/net/socket.h"
#include "comm/store/store.h"

namespace colossal::comm::builtin {

struct TcpTransportOptions {
  // The address to listen on and advertise; "" derives it from route_to.
  std::string address;
  // A host every rank can reach (MASTER_ADDR): our address is the one of the
  // interface that routes there. Used only when `address` is empty.
  std::string route_to = "127.0.0.1";
};

class TcpTransport : public Transport {
 public:
  // Collective over the `size` ranks using `store` (keys "tcp/..."). Errors:
  // the address cannot be bound; a peer never publishes its address or never
  // connects (the store's timeout, naming the rank); a stranger connects.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> create(Store& store, int rank, int size,
                                                             const TcpTransportOptions& options);
  ~TcpTransport() override = default;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "tcp"; }
  std::string describe_peer(int peer) const override;
  absl::StatusOr<size_t> try_send(int peer, const void* data, size_t bytes) override;
  absl::StatusOr<size_t> try_recv(int peer, void* data, size_t bytes) override;
  uint64_t progress_token() override { return 0; }
  absl::Status wait(absl::Span<const Interest> interests, uint64_t token,
                    absl::Time until) override;
  void wake() override;

 private:
  TcpTransport(int rank, int size);

  const int rank_;
  const int size_;
  std::vector<net::Fd> peers_;
  std::vector<std::string> addresses_;  // "host:port" of each rank's listener
  net::Fd wake_;
};

}  // namespace colossal::comm::builtin

#endif  // COLOSSAL_COMM_BUILTIN_TCP_TRANSPORT_H_
