#include "comm/store/tcp_store.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/store/tcp_store_protocol.h"
#include "core/status/status.h"

namespace colossal::comm {

using store_protocol::Command;
using store_protocol::Reader;
using store_protocol::Reply;
using store_protocol::Writer;

namespace {

// How long past its own wait the server may take to answer before the client
// gives up on the connection (a hung or overloaded server).
constexpr absl::Duration kReplyGrace = absl::Seconds(30);

// Key counted by every client at creation (TcpStoreOptions::world_size).
constexpr char kJoinedKey[] = "__colossal_store/joined";
constexpr char kAllJoinedKey[] = "__colossal_store/all_joined";
// The job id the first client recorded (TcpStoreOptions::job_id).
constexpr char kJobKey[] = "__colossal_store/job";

int64_t to_ms(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return -1;
  return std::max<int64_t>(0, absl::ToInt64Milliseconds(d));
}

std::string quoted_keys(absl::Span<const std::string> keys) {
  std::vector<std::string> q;
  for (const std::string& k : keys) q.push_back(absl::StrCat("'", k, "'"));
  return absl::StrJoin(q, ", ");
}

}  // namespace

TcpStore::TcpStore(std::string host, int port, absl::Duration timeout,
                   std::unique_ptr<TcpStoreServer> server)
    : host_(std::move(host)), port_(port), server_(std::move(server)), timeout_(timeout) {}

TcpStore::~TcpStore() {
  // Close our connection before the server goes.
  fd_.reset();
  server_.reset();
}

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::create(const TcpStoreOptions& options) {
  std::unique_ptr<TcpStoreServer> server;
  std::string connect_host = options.host;
  int port = options.port;
  if (options.is_master) {
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> started =
        TcpStoreServer::start(options.listen_address, options.port);
    if (!started.ok() && absl::StrContains(started.status().message(), "Address already in use")) {
      // Two jobs on one machine with the default port: say how to part them.
      return absl::UnavailableError(absl::StrCat(
          started.status().message(), " (another job on this machine has port ", options.port,
          "? give this one another: colossal run --master_port P, or MASTER_PORT=P)"));
    }
    COLOSSAL_ASSIGN_OR_RETURN(server, std::move(started));
    port = server->port();
    // The master's own client talks to its server over the loopback when the
    // server listens everywhere, else on the address it listens on.
    const std::string& l = options.listen_address;
    if (l.empty() || l == "0.0.0.0") {
      connect_host = "127.0.0.1";
    } else if (l == "::") {
      connect_host = "::1";
    } else {
      connect_host = l;
    }
  } else if (options.port <= 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TCP store: port ", options.port, " is out of range (1..65535); set MASTER_PORT"));
  }
  std::unique_ptr<TcpStore> store(
      new TcpStore(connect_host, port, options.timeout, std::move(server)));
  {
    std::lock_guard<std::mutex> lock(store->mu_);
    COLOSSAL_RETURN_IF_ERROR(store->connect(absl::Now() + options.timeout));
  }
  if (!options.job_id.empty()) {
    COLOSSAL_ASSIGN_OR_RETURN(const std::string job, store->compare_set(kJobKey, "", options.job_id));
    if (job != options.job_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          store->describe(), " belongs to another job (job id '", job, "'; this process's is '",
          options.job_id, "'): two jobs were given port ", port,
          "; give this one another (colossal run --master_port P, or MASTER_PORT=P)"));
    }
  }
  if (options.world_size > 0) {
    COLOSSAL_ASSIGN_OR_RETURN(const int64_t joined, store->add(kJoinedKey, 1));
    if (joined == options.world_size) COLOSSAL_RETURN_IF_ERROR(store->set(kAllJoinedKey, "1"));
    if (options.is_master && options.wait_for_workers) {
      const std::vector<std::string> keys = {kAllJoinedKey};
      absl::Status s = store->wait(keys, options.timeout);
      if (!s.ok()) {
        auto now = store->add(kJoinedKey, 0);
        return absl::DeadlineExceededError(absl::StrCat(
            store->describe(), ": only ", now.ok() ? absl::StrCat(*now) : "?", " of ",
            options.world_size, " workers joined within ", absl::FormatDuration(options.timeout)));
      }
    }
  }
  return store;
}

std::string TcpStore::describe() const {
  return absl::StrCat("TCP store ", net::host_port(host_, port_));
}

absl::Duration TcpStore::timeout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeout_;
}

void TcpStore::set_timeout(absl::Duration timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_ = timeout;
}

absl::Status TcpStore::connect(absl::Time deadline) {
  auto fd = net::connect_tcp(host_, port_, deadline);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(),
                        absl::StrCat("TCP store: ", fd.status().message()));
  }
  fd_ = std::move(*fd);
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::call(const std::string& request, absl::Duration server_wait,
                                           absl::string_view what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fd_.valid()) COLOSSAL_RETURN_IF_ERROR(connect(absl::Now() + timeout_));
  const absl::Time deadline = server_wait == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + server_wait + kReplyGrace;
  const std::string context = absl::StrCat(describe(), ": ", what);
  absl::Status s = net::write_all(fd_.get(), request.data(), request.size(), deadline, context);
  char len_bytes[4];
  if (s.ok()) s = net::read_all(fd_.get(), len_bytes, 4, deadline, context);
  std::string body;
  if (s.ok()) {
    const uint32_t len = store_protocol::frame_length(len_bytes);
    if (len == 0 || len > store_protocol::kMaxFrameBytes) {
      s = absl::DataLossError(absl::StrCat(context, ": malformed reply (is ",
                                           net::host_port(host_, port_),
                                           " a colossal TCP store?)"));
    } else {
      body.resize(len);
      s = net::read_all(fd_.get(), body.data(), len, deadline, context);
    }
  }
  if (!s.ok()) {
    fd_.reset();  // the stream is out of step now; reconnect next time
    return s;
  }
  return body;
}

absl::Status TcpStore::set(absl::string_view key, absl::string_view value) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::kSet)).str(key).str(value);
  COLOSSAL_ASSIGN_OR_RETURN(std::string body,
                            call(w.frame(), absl::ZeroDuration(), absl::StrCat("set '", key, "'")));
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::get(absl::string_view key) {
  const absl::Duration t = timeout();
  Writer w;
  w.u8(static_cast<uint8_t>(Command::kGet)).str(key).i64(to_ms(t));
  COLOSSAL_ASSIGN_OR_RETURN(std::string body, call(w.frame(), t, absl::StrCat("get '", key, "'")));
  Reader r(body);
  const auto code = r.u8();
  if (code == static_cast<uint8_t>(Reply::kTimeout)) {
    return absl::DeadlineExceededError(absl::StrCat(describe(), ": timed out after ",
                                                    absl::FormatDuration(t),
                                                    " waiting for key '", key, "'"));
  }
  auto value = r.str();
  if (code != static_cast<uint8_t>(Reply::kOk) || !value) {
    return absl::DataLossError(absl::StrCat(describe(), ": malformed reply to get '", key, "'"));
  }
  return std::move(*value);
}

absl::StatusOr<int64_t> TcpStore::add(absl::string_view key, int64_t delta) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::kAdd)).str(key).i64(delta);
  COLOSSAL_ASSIGN_OR_RETURN(std::string body,
                            call(w.frame(), absl::ZeroDuration(), absl::StrCat("add '", key, "'")));
  Reader r(body);
  const auto code = r.u8();
  if (code == static_cast<uint8_t>(Reply::kError)) {
    auto message = r.str();
    return absl::InvalidArgumentError(
        absl::StrCat(describe(), ": ", message ? *message : "add failed"));
  }
  auto value = r.i64();
  if (code != static_cast<uint8_t>(Reply::kOk) || !value) {
    return absl::DataLossError(absl::StrCat(describe(), ": malformed reply to add '", key, "'"));
  }
  return *value;
}

absl::StatusOr<std::string> TcpStore::compare_set(absl::string_view key, absl::string_view expected,
                                                  absl::string_view desired) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::kCompare)).str(key).str(expected).str(desired);
  COLOSSAL_ASSIGN_OR_RETURN(
      std::string body,
      call(w.frame(), absl::ZeroDuration(), absl::StrCat("compare_set '", key, "'")));
  Reader r(body);
  const auto code = r.u8();
  auto value = r.str();
  if (code != static_cast<uint8_t>(Reply::kOk) || !value) {
    return absl::DataLossError(
        absl::StrCat(describe(), ": malformed reply to compare_set '", key, "'"));
  }
  return std::move(*value);
}

absl::Status TcpStore::wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::kWait)).i64(static_cast<int64_t>(keys.size()));
  for (const std::string& k : keys) w.str(k);
  w.i64(to_ms(timeout));
  COLOSSAL_ASSIGN_OR_RETURN(
      std::string body, call(w.frame(), timeout, absl::StrCat("wait for ", quoted_keys(keys))));
  Reader r(body);
  const auto code = r.u8();
  if (code == static_cast<uint8_t>(Reply::kOk)) return absl::OkStatus();
  if (code == static_cast<uint8_t>(Reply::kTimeout)) {
    std::vector<std::string> missing;
    auto n = r.i64();
    for (int64_t i = 0; n && i < *n; ++i) {
      auto k = r.str();
      if (k) missing.push_back(std::move(*k));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        describe(), ": timed out after ", absl::FormatDuration(timeout), " waiting for key(s) ",
        quoted_keys(missing.empty() ? std::vector<std::string>(keys.begin(), keys.end())
                                    : missing)));
  }
  return absl::DataLossError(absl::StrCat(describe(), ": malformed reply to wait"));
}

absl::StatusOr<int64_t> TcpStore::call_for_count(const std::string& request,
                                                 absl::string_view what, absl::string_view name) {
  // The reply is read where it lies (not moved out first: GCC's -O2
  // maybe-uninitialized analysis misreads a moved-into short string).
  const absl::StatusOr<std::string> body = call(request, absl::ZeroDuration(), what);
  if (!body.ok()) return body.status();
  Reader r(*body);
  const auto code = r.u8();
  const auto v = r.i64();
  if (code != static_cast<uint8_t>(Reply::kOk) || !v) {
    return absl::DataLossError(absl::StrCat(describe(), ": malformed reply to ", name));
  }
  return *v;
}

absl::StatusOr<bool> TcpStore::check(absl::Span<const std::string> keys) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::kCheck)).i64(static_cast<int64_t>(keys.size()));
  for (const std::string& k : keys) w.str(k);
  COLOSSAL_ASSIGN_OR_RETURN(const int64_t all_there, call_for_count(w.frame(), "check", "check"));
  return all_there != 0;
}

absl::StatusOr<bool> TcpStore::delete_key(absl::string_view key) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::kDelete)).str(key);
  COLOSSAL_ASSIGN_OR_RETURN(
      const int64_t deleted,
      call_for_count(w.frame(), absl::StrCat("delete '", key, "'"), "delete"));
  return deleted != 0;
}

absl::StatusOr<int64_t> TcpStore::num_keys() {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::kNumKeys));
  return call_for_count(w.frame(), "num_keys", "num_keys");
}

}  // namespace colossal::comm
