#include "comm/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status/check.h"

namespace colossal::comm::net {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* p) const { freeaddrinfo(p); }
};

absl::StatusOr<std::unique_ptr<addrinfo, AddrInfoDeleter>> resolve(const std::string& host,
                                                                   int port, bool passive,
                                                                   int family = AF_UNSPEC) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve host '", host, "': ",
                                                   gai_strerror(rc)));
  }
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(result);
}

std::string numeric_name(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (getnameinfo(addr, len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return host_port(host, std::atoi(serv));
}

// Waits until `fd` is ready for `events` or the deadline passes. Returns false
// on timeout.
absl::StatusOr<bool> wait_ready(int fd, short events, absl::Time deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, poll_timeout_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) {
      if (absl::Now() >= deadline) return false;
      continue;  // the one-hour clamp of poll_timeout_ms
    }
    if (errno == EINTR) continue;
    return absl::InternalError(absl::StrCat("poll: ", errno_string(errno)));
  }
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string host_port(absl::string_view host, int port) {
  if (absl::StrContains(host, ':')) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

std::string errno_string(int err) {
  char buf[256];
  // GNU strerror_r returns the message (which may not be `buf`).
  return std::string(strerror_r(err, buf, sizeof(buf)));
}

int poll_timeout_ms(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  // Round up so a wait never returns just before the deadline and spins.
  const int64_t ms = absl::ToInt64Milliseconds(left + absl::Microseconds(999));
  return static_cast<int>(std::min<int64_t>(ms, 3600 * 1000));
}

void set_nonblocking(int fd, bool on) {
  const int flags = fcntl(fd, F_GETFL, 0);
  COLOSSAL_CHECK(flags >= 0) << "fcntl(F_GETFL): " << errno_string(errno);
  const int updated = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  COLOSSAL_CHECK(fcntl(fd, F_SETFL, updated) == 0) << "fcntl(F_SETFL): " << errno_string(errno);
}

void set_nodelay(int fd) {
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::StatusOr<Fd> listen_tcp(const std::string& host, int port, int* bound_port, int backlog) {
  const std::string where = host.empty() ? host_port("*", port) : host_port(host, port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("listening on ", where, ": port out of range"));
  }
  // "" means every interface: an IPv6 dual-stack socket, else IPv4's wildcard.
  std::vector<std::string> candidates;
  if (host.empty()) {
    candidates = {"::", "0.0.0.0"};
  } else {
    candidates = {host};
  }
  std::string last_error = "no usable address";
  for (const std::string& candidate : candidates) {
    auto addrs = resolve(candidate, port, /*passive=*/true);
    if (!addrs.ok()) {
      last_error = std::string(addrs.status().message());
      continue;
    }
    for (addrinfo* a = addrs->get(); a != nullptr; a = a->ai_next) {
      Fd fd(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd.valid()) {
        last_error = errno_string(errno);
        continue;
      }
      const int one = 1;
      (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (a->ai_family == AF_INET6 && candidate == "::") {
        const int zero = 0;
        (void)setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      }
      if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || listen(fd.get(), backlog) != 0) {
        last_error = errno_string(errno);
        continue;
      }
      sockaddr_storage local{};
      socklen_t len = sizeof(local);
      COLOSSAL_CHECK(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0)
          << errno_string(errno);
      const int p = local.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port)
                        : ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
      if (bound_port != nullptr) *bound_port = p;
      return fd;
    }
  }
  return absl::UnavailableError(absl::StrCat("listening on ", where, ": ", last_error));
}

absl::StatusOr<Fd> connect_tcp(const std::string& host, int port, absl::Time deadline) {
  const std::string where = host_port(host, port);
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("connecting to ", where, ": port out of range"));
  }
  const absl::Time start = absl::Now();
  absl::Duration backoff = absl::Milliseconds(5);
  std::string last_error;
  for (;;) {
    auto addrs = resolve(host, port, /*passive=*/false);
    if (!addrs.ok()) {
      last_error = std::string(addrs.status().message());
    } else {
      for (addrinfo* a = addrs->get(); a != nullptr; a = a->ai_next) {
        Fd fd(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (!fd.valid()) {
          last_error = errno_string(errno);
          continue;
        }
        // Non-blocking connect so the deadline also bounds a silent SYN.
        set_nonblocking(fd.get(), true);
        int rc = connect(fd.get(), a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
          const absl::Time attempt_deadline = std::min(deadline, absl::Now() + absl::Seconds(10));
          auto ready = wait_ready(fd.get(), POLLOUT, attempt_deadline);
          if (!ready.ok()) return ready.status();
          if (!*ready) {
            last_error = "connection attempt timed out";
            continue;
          }
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
        }
        if (rc != 0) {
          last_error = errno_string(errno);
          continue;
        }
        set_nonblocking(fd.get(), false);
        set_nodelay(fd.get());
        return fd;
      }
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    absl::SleepFor(std::min(backoff, deadline - now));
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("connecting to ", where, ": ", last_error, " (retried for ",
                   absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1))),
                   "; is the other side running and the address right?)"));
}

absl::StatusOr<Fd> accept_tcp(int listen_fd, absl::Time deadline, absl::string_view what) {
  for (;;) {
    auto ready = wait_ready(listen_fd, POLLIN, deadline);
    if (!ready.ok()) return ready.status();
    if (!*ready) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": no connection arrived in time"));
    }
    Fd fd(accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (fd.valid()) {
      set_nodelay(fd.get());
      return fd;
    }
    if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
    return absl::InternalError(absl::StrCat(what, ": accept: ", errno_string(errno)));
  }
}

absl::Status write_all(int fd, const void* data, size_t bytes, absl::Time deadline,
                       absl::string_view what) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = send(fd, p + done, bytes - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto ready = wait_ready(fd, POLLOUT, deadline);
      if (!ready.ok()) return ready.status();
      if (!*ready) {
        return absl::DeadlineExceededError(absl::StrCat(what, ": timed out sending to ",
                                                        peer_name(fd), " (", done, " of ", bytes,
                                                        " bytes sent)"));
      }
      continue;
    }
    return absl::UnavailableError(absl::StrCat(what, ": sending to ", peer_name(fd), ": ",
                                               errno_string(errno)));
  }
  return absl::OkStatus();
}

absl::Status read_all(int fd, void* data, size_t bytes, absl::Time deadline,
                      absl::string_view what) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = recv(fd, p + done, bytes - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat(what, ": connection closed by the peer (",
                                                 done, " of ", bytes, " bytes received)"));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      auto ready = wait_ready(fd, POLLIN, deadline);
      if (!ready.ok()) return ready.status();
      if (!*ready) {
        return absl::DeadlineExceededError(absl::StrCat(what, ": timed out receiving from ",
                                                        peer_name(fd), " (", done, " of ", bytes,
                                                        " bytes received)"));
      }
      continue;
    }
    return absl::UnavailableError(absl::StrCat(what, ": receiving from ", peer_name(fd), ": ",
                                               errno_string(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> local_address_toward(const std::string& host) {
  auto addrs = resolve(host, 9, /*passive=*/false);
  if (!addrs.ok()) return addrs.status();
  std::string last_error = "no address";
  for (addrinfo* a = addrs->get(); a != nullptr; a = a->ai_next) {
    Fd fd(socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) continue;
    // connect() on a UDP socket only picks the route; nothing is sent.
    if (connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last_error = errno_string(errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    char name[NI_MAXHOST];
    if (getnameinfo(reinterpret_cast<sockaddr*>(&local), len, name, sizeof(name), nullptr, 0,
                    NI_NUMERICHOST) != 0) {
      continue;
    }
    return std::string(name);
  }
  return absl::UnavailableError(
      absl::StrCat("no local interface routes toward '", host, "': ", last_error));
}

std::string peer_name(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  return numeric_name(reinterpret_cast<sockaddr*>(&addr), len);
}

}  // namespace colossal::comm::net
