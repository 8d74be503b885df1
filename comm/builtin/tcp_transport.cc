#include "comm/builtin/tcp_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status/check.h"
#include "core/status/status.h"

namespace colossal::comm::builtin {
namespace {

constexpr uint32_t kHelloMagic = 0x50434c43;  // "CLCP"

struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint64_t nonce;
};

// Splits "host:port" or "[v6]:port".
bool split_host_port(const std::string& s, std::string* host, int* port) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) return false;
  std::string h = s.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  *host = h;
  return absl::SimpleAtoi(s.substr(colon + 1), port);
}

}  // namespace

TcpTransport::TcpTransport(int rank, int size)
    : rank_(rank), size_(size), peers_(size), addresses_(size) {
  wake_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  COLOSSAL_CHECK(wake_.valid()) << "eventfd: " << net::errno_string(errno);
}

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::create(
    Store& store, int rank, int size, const TcpTransportOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("tcp transport: rank ", rank, " of ", size));
  }
  std::unique_ptr<TcpTransport> t(new TcpTransport(rank, size));
  if (size == 1) return t;

  std::string address = options.address;
  if (address.empty()) {
    COLOSSAL_ASSIGN_OR_RETURN(address, net::local_address_toward(options.route_to));
  }
  int port = 0;
  auto listener = net::listen_tcp(address, 0, &port);
  if (!listener.ok()) return core::annotate(listener.status(), "tcp transport");
  t->addresses_[rank] = net::host_port(address, port);

  // The group's nonce keeps strangers (or another group's ranks) out.
  uint64_t nonce = 0;
  {
    std::random_device rd;
    const std::string mine = absl::StrCat((static_cast<uint64_t>(rd()) << 32) | rd());
    COLOSSAL_ASSIGN_OR_RETURN(std::string agreed, store.compare_set("tcp/nonce", "", mine));
    if (!absl::SimpleAtoi(agreed, &nonce)) {
      return absl::DataLossError(absl::StrCat("tcp transport: malformed nonce '", agreed, "'"));
    }
  }
  COLOSSAL_RETURN_IF_ERROR(store.set(absl::StrCat("tcp/", rank), t->addresses_[rank]));

  const absl::Time deadline = absl::Now() + store.timeout();
  // Connect to every lower rank (it is listening: it published first).
  for (int p = 0; p < rank; ++p) {
    auto value = store.get(absl::StrCat("tcp/", p));
    if (!value.ok()) {
      return core::annotate(value.status(),
                            absl::StrCat("tcp transport: waiting for rank ", p, "'s address"));
    }
    std::string host;
    int peer_port = 0;
    if (!split_host_port(*value, &host, &peer_port)) {
      return absl::DataLossError(
          absl::StrCat("tcp transport: rank ", p, " published a malformed address '", *value, "'"));
    }
    t->addresses_[p] = *value;
    auto fd = net::connect_tcp(host, peer_port, deadline);
    if (!fd.ok()) {
      return core::annotate(fd.status(), absl::StrCat("tcp transport: connecting to rank ", p));
    }
    const Hello hello{kHelloMagic, static_cast<uint32_t>(rank), nonce};
    COLOSSAL_RETURN_IF_ERROR(net::write_all(fd->get(), &hello, sizeof(hello), deadline,
                                            absl::StrCat("tcp transport: greeting rank ", p)));
    t->peers_[p] = std::move(*fd);
  }
  // Accept every higher rank, in whatever order they come.
  for (int accepted = 0; accepted < size - 1 - rank;) {
    auto fd = net::accept_tcp(
        listener->get(), deadline,
        absl::StrCat("tcp transport: rank ", rank, " at ", t->addresses_[rank], " waiting for ",
                     size - 1 - rank - accepted, " higher rank(s) to connect"));
    if (!fd.ok()) return fd.status();
    Hello hello{};
    absl::Status s = net::read_all(fd->get(), &hello, sizeof(hello), deadline,
                                   "tcp transport: reading a peer's greeting");
    if (!s.ok() || hello.magic != kHelloMagic || hello.nonce != nonce ||
        static_cast<int>(hello.rank) <= rank || static_cast<int>(hello.rank) >= size ||
        t->peers_[hello.rank].valid()) {
      continue;  // not one of ours: drop it and keep waiting
    }
    t->peers_[hello.rank] = std::move(*fd);
    ++accepted;
  }
  for (int p = rank + 1; p < size; ++p) {
    auto value = store.get(absl::StrCat("tcp/", p));
    t->addresses_[p] = value.ok() ? *value : "?";
  }
  for (int p = 0; p < size; ++p) {
    if (p != rank) net::set_nonblocking(t->peers_[p].get(), true);
  }
  return t;
}

std::string TcpTransport::describe_peer(int peer) const {
  return absl::StrCat("rank ", peer, " at ", addresses_[peer]);
}

absl::StatusOr<size_t> TcpTransport::try_send(int peer, const void* data, size_t bytes) {
  COLOSSAL_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "peer " << peer;
  for (;;) {
    const ssize_t n = send(peers_[peer].get(), data, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return absl::UnavailableError(absl::StrCat("connection to ", describe_peer(peer), " lost: ",
                                               net::errno_string(errno)));
  }
}

absl::StatusOr<size_t> TcpTransport::try_recv(int peer, void* data, size_t bytes) {
  COLOSSAL_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "peer " << peer;
  if (bytes == 0) return size_t{0};
  for (;;) {
    const ssize_t n = recv(peers_[peer].get(), data, bytes, MSG_DONTWAIT);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat(describe_peer(peer), " closed the connection (has it exited?)"));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return absl::UnavailableError(absl::StrCat("connection to ", describe_peer(peer), " lost: ",
                                               net::errno_string(errno)));
  }
}

absl::Status TcpTransport::wait(absl::Span<const Interest> interests, uint64_t token,
                                absl::Time until) {
  std::vector<pollfd> fds;
  fds.reserve(interests.size() + 1);
  fds.push_back({wake_.get(), POLLIN, 0});
  for (const Interest& i : interests) {
    fds.push_back({peers_[i.peer].get(), static_cast<short>(i.send ? POLLOUT : POLLIN), 0});
  }
  const int rc = poll(fds.data(), fds.size(), net::poll_timeout_ms(until));
  if (rc < 0 && errno != EINTR) {
    return absl::InternalError(absl::StrCat("poll: ", net::errno_string(errno)));
  }
  if (rc > 0 && (fds[0].revents & POLLIN)) {
    uint64_t drained;
    (void)!read(wake_.get(), &drained, sizeof(drained));
  }
  return absl::OkStatus();  // errors (POLLERR/POLLHUP) surface in try_send/try_recv
}

void TcpTransport::wake() {
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
}

}  // namespace colossal::comm::builtin
