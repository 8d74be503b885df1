// colossal::comm::net — TCP sockets with deadlines, for the store and the TCP transport.
//
// Small helpers over POSIX sockets: an owning file descriptor, listening on an
// address (all interfaces, or one), connecting with retries until a deadline
// (the peer may not be listening yet), accepting with a deadline, and reading
// or writing a whole buffer before a deadline. Every error is an absl::Status
// whose message names the address and what was being done, e.g.
//   connecting to 127.0.0.1:29500: Connection refused (retried for 30s)
// IPv4 and IPv6 both work; hosts are names or numeric addresses.
//
//   int port = 0;
//   COLOSSAL_ASSIGN_OR_RETURN(Fd listener, listen_tcp("127.0.0.1", 0, &port));
//   COLOSSAL_ASSIGN_OR_RETURN(Fd client, connect_tcp("127.0.0.1", port, deadline));
//   COLOSSAL_ASSIGN_OR_RETURN(Fd server, accept_tcp(listener.get(), deadline, "test"));
//   COLOSSAL_RETURN_IF_ERROR(write_all(client.get(), "hi", 2, deadline, "greeting"));
#ifndef COLOSSAL_COMM_NET_SOCKET_H_
#define COLOSSAL_COMM_NET_SOCKET_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace colossal::comm::net {

// Owns a file descriptor (closed on destruction). Movable, not copyable.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "host:port", with brackets around an IPv6 address ("[::1]:80").
std::string host_port(absl::string_view host, int port);

// A listening TCP socket on `host` ("" means every interface, IPv6 and IPv4
// when the system has IPv6; "0.0.0.0" every IPv4 interface; "127.0.0.1" the
// loopback only) and `port` (0: an ephemeral port the kernel picks). The port
// actually bound is stored in *bound_port. SO_REUSEADDR is set.
absl::StatusOr<Fd> listen_tcp(const std::string& host, int port, int* bound_port,
                              int backlog = 128);

// Connects to host:port, retrying refused or unreachable attempts every few
// milliseconds (growing to 1 s) until `deadline`: the listener may start
// later. The socket is blocking, with TCP_NODELAY set.
absl::StatusOr<Fd> connect_tcp(const std::string& host, int port, absl::Time deadline);

// Accepts one connection on `listen_fd` before `deadline`. `what` names the
// wait for the error message ("accepting rank 3").
absl::StatusOr<Fd> accept_tcp(int listen_fd, absl::Time deadline, absl::string_view what);

// Writes/reads exactly `bytes` bytes before `deadline`, whatever the socket's
// blocking mode. `what` describes the transfer for error messages. A peer
// that closes the connection is UnavailableError; the deadline passing is
// DeadlineExceededError.
absl::Status write_all(int fd, const void* data, size_t bytes, absl::Time deadline,
                       absl::string_view what);
absl::Status read_all(int fd, void* data, size_t bytes, absl::Time deadline,
                      absl::string_view what);

// O_NONBLOCK on or off; TCP_NODELAY on.
void set_nonblocking(int fd, bool on);
void set_nodelay(int fd);

// The numeric address of this host's interface that routes toward `host`
// (no packet is sent: it connects a UDP socket and reads its local name).
// For "127.0.0.1" it is "127.0.0.1". Peers on other hosts can reach us there.
absl::StatusOr<std::string> local_address_toward(const std::string& host);

// The peer's numeric "host:port" of a connected socket, or "?".
std::string peer_name(int fd);

// Milliseconds from now until `deadline` for poll(): clamped to [0, 1 hour];
// -1 for an infinite deadline.
int poll_timeout_ms(absl::Time deadline);

// strerror(errno) as a std::string, thread-safe.
std::string errno_string(int err);

}  // namespace colossal::comm::net

#endif  // COLOSSAL_COMM_NET_SOCKET_H_
