#include "comm/builtin/inproc_transport.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/check.h"

namespace colossal::comm::builtin {

struct InprocTransport::Group {
  struct Queue {
    std::mutex mu;
    std::vector<char> ring;
    uint64_t head = 0;  // total bytes written
    uint64_t tail = 0;  // total bytes read
  };
  struct Bell {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t token = 0;
  };

  Group(int size, size_t capacity) : size(size), capacity(capacity), bells(size) {
    queues.reserve(static_cast<size_t>(size) * size);
    for (int i = 0; i < size * size; ++i) {
      queues.push_back(std::make_unique<Queue>());
      queues.back()->ring.resize(capacity);
    }
  }
  Queue& queue(int from, int to) { return *queues[static_cast<size_t>(from) * size + to]; }
  void ring(int rank) {
    Bell& b = bells[rank];
    {
      std::lock_guard<std::mutex> lock(b.mu);
      ++b.token;
    }
    b.cv.notify_all();
  }

  const int size;
  const size_t capacity;
  std::vector<std::unique_ptr<Queue>> queues;
  std::vector<Bell> bells;
  std::vector<bool> joined = std::vector<bool>(size, false);
};

namespace {

std::mutex registry_mu;
// Groups being joined or in use, by name; entries expire with their last rank.
std::map<std::string, std::weak_ptr<InprocTransport::Group>>& registry() {
  static auto* r = new std::map<std::string, std::weak_ptr<InprocTransport::Group>>();
  return *r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InprocTransport>> InprocTransport::create(
    const std::string& name, int rank, int size, const InprocTransportOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("inproc transport '", name, "': rank ", rank,
                                                   " of ", size));
  }
  if (options.capacity == 0) {
    return absl::InvalidArgumentError("inproc transport: capacity must be positive");
  }
  std::lock_guard<std::mutex> lock(registry_mu);
  std::shared_ptr<Group> group = registry()[name].lock();
  if (!group) {
    group = std::make_shared<Group>(size, options.capacity);
    registry()[name] = group;
  }
  if (group->size != size || group->capacity != options.capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inproc transport '", name, "': rank ", rank, " joins with size ", size, " and capacity ",
        options.capacity, " but the group has size ", group->size, " and capacity ",
        group->capacity));
  }
  if (group->joined[rank]) {
    return absl::InvalidArgumentError(
        absl::StrCat("inproc transport '", name, "': rank ", rank, " joined twice"));
  }
  group->joined[rank] = true;
  return std::unique_ptr<InprocTransport>(new InprocTransport(group, name, rank, size));
}

InprocTransport::InprocTransport(std::shared_ptr<Group> group, std::string name, int rank,
                                 int size)
    : group_(std::move(group)), name_(std::move(name)), rank_(rank), size_(size) {}

InprocTransport::~InprocTransport() {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = registry().find(name_);
  if (it != registry().end() && it->second.lock() == group_ && group_.use_count() <= 2) {
    registry().erase(it);  // the last rank leaves (the registry's lock() copy is the other)
  }
}

std::string InprocTransport::describe_peer(int peer) const {
  return absl::StrCat("rank ", peer, " (thread of this process)");
}

absl::StatusOr<size_t> InprocTransport::try_send(int peer, const void* data, size_t bytes) {
  COLOSSAL_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "peer " << peer;
  Group::Queue& q = group_->queue(rank_, peer);
  size_t n;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    const size_t cap = group_->capacity;
    n = std::min(bytes, cap - static_cast<size_t>(q.head - q.tail));
    const char* src = static_cast<const char*>(data);
    for (size_t done = 0; done < n;) {
      const size_t at = static_cast<size_t>((q.head + done) % cap);
      const size_t run = std::min(n - done, cap - at);
      std::memcpy(q.ring.data() + at, src + done, run);
      done += run;
    }
    q.head += n;
  }
  if (n > 0) group_->ring(peer);
  return n;
}

absl::StatusOr<size_t> InprocTransport::try_recv(int peer, void* data, size_t bytes) {
  COLOSSAL_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "peer " << peer;
  Group::Queue& q = group_->queue(peer, rank_);
  size_t n;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    const size_t cap = group_->capacity;
    n = std::min(bytes, static_cast<size_t>(q.head - q.tail));
    char* dst = static_cast<char*>(data);
    for (size_t done = 0; done < n;) {
      const size_t at = static_cast<size_t>((q.tail + done) % cap);
      const size_t run = std::min(n - done, cap - at);
      std::memcpy(dst + done, q.ring.data() + at, run);
      done += run;
    }
    q.tail += n;
  }
  if (n > 0) group_->ring(peer);  // the sender may be waiting for space
  return n;
}

uint64_t InprocTransport::progress_token() {
  Group::Bell& b = group_->bells[rank_];
  std::lock_guard<std::mutex> lock(b.mu);
  return b.token;
}

absl::Status InprocTransport::wait(absl::Span<const Interest> interests, uint64_t token,
                                   absl::Time until) {
  Group::Bell& b = group_->bells[rank_];
  std::unique_lock<std::mutex> lock(b.mu);
  if (until == absl::InfiniteFuture()) {
    b.cv.wait(lock, [&] { return b.token != token; });
  } else {
    b.cv.wait_until(lock, absl::ToChronoTime(until), [&] { return b.token != token; });
  }
  return absl::OkStatus();
}

void InprocTransport::wake() { group_->ring(rank_); }

}  // namespace colossal::comm::builtin
