// TcpStoreServer: one thread, poll() over the listener, a wake-up eventfd and
// every client connection; requests of one connection are served in order,
// and a blocking request (get/wait) parks its connection until the keys exist
// or its deadline passes.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/net/socket.h"
#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_protocol.h"
#include "core/status/check.h"

namespace colossal::comm {

using store_protocol::Command;
using store_protocol::Reader;
using store_protocol::Reply;
using store_protocol::Writer;

class TcpStoreServer::Loop {
 public:
  explicit Loop(net::Fd listener) : listener_(std::move(listener)) {
    wake_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    COLOSSAL_CHECK(wake_.valid()) << "eventfd: " << net::errno_string(errno);
    net::set_nonblocking(listener_.get(), true);
  }

  void stop() {
    const uint64_t one = 1;
    (void)!write(wake_.get(), &one, sizeof(one));
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<int> ids;
    for (;;) {
      fds.clear();
      ids.clear();
      fds.push_back({wake_.get(), POLLIN, 0});
      fds.push_back({listener_.get(), POLLIN, 0});
      absl::Time next_deadline = absl::InfiniteFuture();
      for (auto& [id, conn] : conns_) {
        short events = POLLIN;
        if (!conn.out.empty()) events |= POLLOUT;
        fds.push_back({conn.fd.get(), events, 0});
        ids.push_back(id);
        if (conn.pending) next_deadline = std::min(next_deadline, conn.pending->deadline);
      }
      const int rc = poll(fds.data(), fds.size(), net::poll_timeout_ms(next_deadline));
      if (rc < 0 && errno != EINTR) {
        COLOSSAL_FATAL() << "TCP store server: poll: " << net::errno_string(errno);
      }
      if (rc > 0 && (fds[0].revents & POLLIN)) return;  // stop()
      if (rc > 0 && (fds[1].revents & POLLIN)) accept_all();
      for (size_t i = 2; rc > 0 && i < fds.size(); ++i) {
        auto it = conns_.find(ids[i - 2]);
        if (it == conns_.end()) continue;
        Conn& conn = it->second;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(conn);
        if (fds[i].revents & POLLOUT) flush(conn);
      }
      // Serve until nothing changes: a set may release parked waiters, whose
      // connections may hold further requests.
      do {
        changed_ = false;
        for (auto& [id, conn] : conns_) service(conn);
      } while (changed_);
      for (auto& [id, conn] : conns_) flush(conn);
      for (auto it = conns_.begin(); it != conns_.end();) {
        if (it->second.closed) {
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

 private:
  struct Pending {
    Command command;
    std::vector<std::string> keys;
    absl::Time deadline;
  };
  struct Conn {
    net::Fd fd;
    std::string in;
    std::string out;
    std::optional<Pending> pending;
    bool closed = false;
  };

  void accept_all() {
    for (;;) {
      net::Fd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd.valid()) return;  // EAGAIN (or a transient error: retried on the next poll)
      net::set_nodelay(fd.get());
      Conn conn;
      conn.fd = std::move(fd);
      conns_.emplace(next_id_++, std::move(conn));
    }
  }

  void read_from(Conn& conn) {
    char buf[65536];
    for (;;) {
      const ssize_t n = recv(conn.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        conn.in.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      conn.closed = true;  // EOF or error: the client went away
      return;
    }
  }

  void flush(Conn& conn) {
    while (!conn.out.empty() && !conn.closed) {
      const ssize_t n = send(conn.fd.get(), conn.out.data(), conn.out.size(),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        conn.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      conn.closed = true;
    }
  }

  bool present(const std::vector<std::string>& keys) const {
    for (const std::string& k : keys) {
      if (!table_.count(k)) return false;
    }
    return true;
  }

  void service(Conn& conn) {
    if (conn.closed) return;
    for (;;) {
      if (conn.pending) {
        if (present(conn.pending->keys)) {
          Writer w;
          w.u8(static_cast<uint8_t>(Reply::kOk));
          if (conn.pending->command == Command::kGet) w.str(table_.at(conn.pending->keys[0]));
          conn.out += w.frame();
          conn.pending.reset();
        } else if (absl::Now() >= conn.pending->deadline) {
          Writer w;
          w.u8(static_cast<uint8_t>(Reply::kTimeout));
          if (conn.pending->command == Command::kWait) {
            std::vector<std::string> missing;
            for (const std::string& k : conn.pending->keys) {
              if (!table_.count(k)) missing.push_back(k);
            }
            w.i64(static_cast<int64_t>(missing.size()));
            for (const std::string& k : missing) w.str(k);
          }
          conn.out += w.frame();
          conn.pending.reset();
        } else {
          return;
        }
      }
      if (conn.in.size() < 4) return;
      const uint32_t len = store_protocol::frame_length(conn.in.data());
      if (len > store_protocol::kMaxFrameBytes) {
        conn.closed = true;  // not our protocol
        return;
      }
      if (conn.in.size() < 4 + static_cast<size_t>(len)) return;
      const std::string body = conn.in.substr(4, len);
      conn.in.erase(0, 4 + static_cast<size_t>(len));
      if (!handle(conn, body)) {
        conn.closed = true;  // malformed request
        return;
      }
    }
  }

  static absl::Time deadline_of(int64_t timeout_ms) {
    if (timeout_ms < 0) return absl::InfiniteFuture();
    return absl::Now() + absl::Milliseconds(timeout_ms);
  }

  void reply_ok(Conn& conn, const Writer& w) { conn.out += w.frame(); }

  // Serves one request; false when it is malformed.
  bool handle(Conn& conn, const std::string& body) {
    Reader r(body);
    auto cmd = r.u8();
    if (!cmd) return false;
    Writer w;
    switch (static_cast<Command>(*cmd)) {
      case Command::kSet: {
        auto key = r.str();
        auto value = r.str();
        if (!key || !value || !r.at_end()) return false;
        table_[*key] = std::move(*value);
        changed_ = true;
        reply_ok(conn, w.u8(static_cast<uint8_t>(Reply::kOk)));
        return true;
      }
      case Command::kGet:
      case Command::kWait: {
        std::vector<std::string> keys;
        if (static_cast<Command>(*cmd) == Command::kGet) {
          auto key = r.str();
          if (!key) return false;
          keys.push_back(std::move(*key));
        } else {
          auto count = r.i64();
          if (!count || *count < 0 || *count > 1000000) return false;
          for (int64_t i = 0; i < *count; ++i) {
            auto key = r.str();
            if (!key) return false;
            keys.push_back(std::move(*key));
          }
        }
        auto timeout_ms = r.i64();
        if (!timeout_ms || !r.at_end()) return false;
        // Parked; service() answers now if the keys are there, or later.
        conn.pending = Pending{static_cast<Command>(*cmd), std::move(keys), deadline_of(*timeout_ms)};
        return true;
      }
      case Command::kAdd: {
        auto key = r.str();
        auto delta = r.i64();
        if (!key || !delta || !r.at_end()) return false;
        int64_t value = 0;
        auto it = table_.find(*key);
        if (it != table_.end()) {
          const std::string& text = it->second;
          const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
          if (ec != std::errc() || end != text.data() + text.size()) {
            w.u8(static_cast<uint8_t>(Reply::kError))
                .str(absl::StrCat("add: key '", *key, "' holds a value that is not an integer"));
            reply_ok(conn, w);
            return true;
          }
        }
        value += *delta;
        table_[*key] = absl::StrCat(value);
        changed_ = true;
        reply_ok(conn, w.u8(static_cast<uint8_t>(Reply::kOk)).i64(value));
        return true;
      }
      case Command::kCompare: {
        auto key = r.str();
        auto expected = r.str();
        auto desired = r.str();
        if (!key || !expected || !desired || !r.at_end()) return false;
        auto it = table_.find(*key);
        if (it == table_.end()) {
          if (expected->empty()) {
            table_[*key] = *desired;
            changed_ = true;
            reply_ok(conn, w.u8(static_cast<uint8_t>(Reply::kOk)).str(*desired));
          } else {
            reply_ok(conn, w.u8(static_cast<uint8_t>(Reply::kOk)).str(*expected));
          }
          return true;
        }
        if (it->second == *expected) {
          it->second = *desired;
          changed_ = true;
        }
        reply_ok(conn, w.u8(static_cast<uint8_t>(Reply::kOk)).str(it->second));
        return true;
      }
      case Command::kCheck: {
        auto count = r.i64();
        if (!count || *count < 0 || *count > 1000000) return false;
        std::vector<std::string> keys;
        for (int64_t i = 0; i < *count; ++i) {
          auto key = r.str();
          if (!key) return false;
          keys.push_back(std::move(*key));
        }
        if (!r.at_end()) return false;
        reply_ok(conn, w.u8(static_cast<uint8_t>(Reply::kOk)).i64(present(keys) ? 1 : 0));
        return true;
      }
      case Command::kDelete: {
        auto key = r.str();
        if (!key || !r.at_end()) return false;
        const bool existed = table_.erase(*key) > 0;
        reply_ok(conn, w.u8(static_cast<uint8_t>(Reply::kOk)).i64(existed ? 1 : 0));
        return true;
      }
      case Command::kNumKeys: {
        if (!r.at_end()) return false;
        reply_ok(conn, w.u8(static_cast<uint8_t>(Reply::kOk)).i64(static_cast<int64_t>(table_.size())));
        return true;
      }
    }
    return false;
  }

  net::Fd listener_;
  net::Fd wake_;
  std::map<int, Conn> conns_;
  int next_id_ = 0;
  std::unordered_map<std::string, std::string> table_;
  bool changed_ = false;
};

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(
    const std::string& listen_address, int port) {
  int bound = 0;
  auto listener = net::listen_tcp(listen_address, port, &bound);
  if (!listener.ok()) {
    return absl::Status(listener.status().code(),
                        absl::StrCat("TCP store server: ", listener.status().message()));
  }
  auto loop = std::make_unique<Loop>(std::move(*listener));
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(listen_address, bound, std::move(loop)));
}

TcpStoreServer::TcpStoreServer(std::string listen_address, int port, std::unique_ptr<Loop> loop)
    : listen_address_(std::move(listen_address)), port_(port), loop_(std::move(loop)) {
  thread_ = std::thread([this] { loop_->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  loop_->stop();
  thread_.join();
}

}  // namespace colossal::comm
