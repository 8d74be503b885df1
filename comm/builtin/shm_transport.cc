#include "comm/builtin/shm_transport.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/net/socket.h"
#include "core/status/check.h"
#include "core/status/status.h"

namespace colossal::comm::builtin {

namespace {

constexpr uint64_t kMagic = 0x434f4c5353484d31ull;  // "COLSSHM1"
constexpr size_t kCacheLine = 64;

struct alignas(kCacheLine) SegmentHeader {
  uint64_t magic;
  int32_t rank;
  int32_t size;
  uint64_t capacity;
  alignas(kCacheLine) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleepers;
};

struct alignas(kCacheLine) RingControl {
  alignas(kCacheLine) std::atomic<uint64_t> head;  // bytes written by the peer
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // bytes read by the owner
};

static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex word must be lock-free");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "ring counters must be lock-free");

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t segment_bytes(int size, size_t capacity) {
  return sizeof(SegmentHeader) + size * sizeof(RingControl) + size * round_up(capacity, kCacheLine);
}

SegmentHeader* header_of(void* seg) { return static_cast<SegmentHeader*>(seg); }
RingControl* ring_of(void* seg, int from) {
  return reinterpret_cast<RingControl*>(static_cast<char*>(seg) + sizeof(SegmentHeader)) + from;
}
char* data_of(void* seg, int size, size_t capacity, int from) {
  return static_cast<char*>(seg) + sizeof(SegmentHeader) + size * sizeof(RingControl) +
         from * round_up(capacity, kCacheLine);
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

absl::Status shm_error(absl::string_view what, const std::string& name, int err) {
  const std::string hint =
      err == ENOSPC || err == ENOMEM
          ? " (is /dev/shm full or too small? in Docker raise --shm-size)"
          : "";
  return absl::UnavailableError(absl::StrCat("shared-memory transport: ", what, " ", name, ": ",
                                             net::errno_string(err), hint));
}

}  // namespace

ShmTransport::ShmTransport(int rank, int size, size_t capacity)
    : rank_(rank), size_(size), capacity_(capacity), maps_(size, nullptr), pids_(size, 0) {}

ShmTransport::~ShmTransport() {
  for (void* m : maps_) {
    if (m != nullptr) munmap(m, segment_bytes_);
  }
}

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::create(
    Store& store, int rank, int size, const ShmTransportOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("shm transport: rank ", rank, " of ", size));
  }
  size_t capacity = options.capacity;
  if (capacity == 0) {
    const size_t budget = size_t{256} << 20;
    capacity = std::clamp(budget / (static_cast<size_t>(size) * size), size_t{64} << 10,
                          size_t{1} << 20);
  }
  capacity = round_up(capacity, kCacheLine);
  std::unique_ptr<ShmTransport> t(new ShmTransport(rank, size, capacity));
  t->segment_bytes_ = segment_bytes(size, capacity);
  if (size == 1) {
    // Nobody to talk to; a private doorbell keeps wait()/wake() working.
    void* m = mmap(nullptr, t->segment_bytes_, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return shm_error("mapping", "an anonymous segment", errno);
    new (m) SegmentHeader;
    t->maps_[0] = m;
    t->pids_[0] = getpid();
    return t;
  }

  // Our segment, under a name nobody else can have picked.
  std::random_device rd;
  const std::string name = absl::StrCat("/colossal-", getpid(), "-", rd(), rd(), "-r", rank);
  {
    net::Fd fd(shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
    if (!fd.valid()) return shm_error("creating", name, errno);
    if (ftruncate(fd.get(), static_cast<off_t>(t->segment_bytes_)) != 0) {
      const int err = errno;
      shm_unlink(name.c_str());
      return shm_error("sizing", name, err);
    }
    void* m = mmap(nullptr, t->segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      shm_unlink(name.c_str());
      return shm_error("mapping", name, err);
    }
    t->maps_[rank] = m;
    SegmentHeader* h = new (m) SegmentHeader;
    h->rank = rank;
    h->size = size;
    h->capacity = capacity;
    h->doorbell.store(0);
    h->sleepers.store(0);
    for (int p = 0; p < size; ++p) {
      RingControl* rc = new (ring_of(m, p)) RingControl;
      rc->head.store(0);
      rc->tail.store(0);
    }
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = kMagic;
  }
  t->pids_[rank] = getpid();
  const std::string host = hostname();
  absl::Status published =
      store.set(absl::StrCat("shm/", rank), absl::StrCat(name, "|", host, "|", getpid()));
  if (!published.ok()) {
    shm_unlink(name.c_str());
    return published;
  }

  absl::Status status;
  for (int p = 0; p < size && status.ok(); ++p) {
    if (p == rank) continue;
    auto value = store.get(absl::StrCat("shm/", p));
    if (!value.ok()) {
      status = core::annotate(value.status(), absl::StrCat("shared-memory transport: waiting for rank ",
                                                           p, " to publish its segment"));
      break;
    }
    std::vector<std::string> parts = absl::StrSplit(*value, '|');
    int pid = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[2], &pid)) {
      status = absl::DataLossError(absl::StrCat("shared-memory transport: rank ", p,
                                                " published a malformed entry '", *value, "'"));
      break;
    }
    if (parts[1] != host) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "shared-memory transport: rank ", p, " runs on host '", parts[1], "', rank ", rank,
          " on '", host, "'; shared memory works within one host: use the tcp transport"));
      break;
    }
    net::Fd fd(shm_open(parts[0].c_str(), O_RDWR | O_CLOEXEC, 0600));
    if (!fd.valid()) {
      status = shm_error(absl::StrCat("opening rank ", p, "'s segment"), parts[0], errno);
      break;
    }
    struct stat st {};
    if (fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) != t->segment_bytes_) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "shared-memory transport: rank ", p, "'s segment has ", st.st_size, " bytes, expected ",
          t->segment_bytes_, " (ranks disagree on the group size or ring capacity)"));
      break;
    }
    void* m = mmap(nullptr, t->segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (m == MAP_FAILED) {
      status = shm_error("mapping", parts[0], errno);
      break;
    }
    t->maps_[p] = m;
    t->pids_[p] = pid;
    if (header_of(m)->magic != kMagic || header_of(m)->rank != p || header_of(m)->size != size) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "shared-memory transport: rank ", p, "'s segment ", parts[0], " is not initialised"));
    }
  }
  // Everyone has mapped everything (or failed): our name can go.
  if (status.ok()) {
    status = barrier(store, "shm/mapped", size, store.timeout());
  }
  shm_unlink(name.c_str());
  if (!status.ok()) return status;
  return t;
}

std::string ShmTransport::describe_peer(int peer) const {
  return absl::StrCat("rank ", peer, " (pid ", pids_[peer], ")");
}

void ShmTransport::ring_doorbell(int rank) {
  SegmentHeader* h = header_of(maps_[rank]);
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst) != 0) {
    futex(&h->doorbell, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

absl::StatusOr<size_t> ShmTransport::try_send(int peer, const void* data, size_t bytes) {
  COLOSSAL_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "peer " << peer;
  void* seg = maps_[peer];
  RingControl* rc = ring_of(seg, rank_);
  const uint64_t head = rc->head.load(std::memory_order_relaxed);  // we are the only writer
  const uint64_t tail = rc->tail.load(std::memory_order_acquire);
  const size_t n = std::min(bytes, capacity_ - static_cast<size_t>(head - tail));
  if (n == 0) return size_t{0};
  char* ring = data_of(seg, size_, capacity_, rank_);
  const char* src = static_cast<const char*>(data);
  for (size_t done = 0; done < n;) {
    const size_t at = static_cast<size_t>((head + done) % capacity_);
    const size_t run = std::min(n - done, capacity_ - at);
    std::memcpy(ring + at, src + done, run);
    done += run;
  }
  rc->head.store(head + n, std::memory_order_release);
  ring_doorbell(peer);
  return n;
}

absl::StatusOr<size_t> ShmTransport::try_recv(int peer, void* data, size_t bytes) {
  COLOSSAL_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "peer " << peer;
  void* seg = maps_[rank_];
  RingControl* rc = ring_of(seg, peer);
  const uint64_t tail = rc->tail.load(std::memory_order_relaxed);  // we are the only reader
  const uint64_t head = rc->head.load(std::memory_order_acquire);
  const size_t n = std::min(bytes, static_cast<size_t>(head - tail));
  if (n == 0) return size_t{0};
  const char* ring = data_of(seg, size_, capacity_, peer);
  char* dst = static_cast<char*>(data);
  for (size_t done = 0; done < n;) {
    const size_t at = static_cast<size_t>((tail + done) % capacity_);
    const size_t run = std::min(n - done, capacity_ - at);
    std::memcpy(dst + done, ring + at, run);
    done += run;
  }
  rc->tail.store(tail + n, std::memory_order_release);
  ring_doorbell(peer);  // the writer may be waiting for space
  return n;
}

uint64_t ShmTransport::progress_token() {
  return header_of(maps_[rank_])->doorbell.load(std::memory_order_seq_cst);
}

absl::Status ShmTransport::wait(absl::Span<const Interest> interests, uint64_t token,
                                absl::Time until) {
  SegmentHeader* h = header_of(maps_[rank_]);
  const uint32_t expected = static_cast<uint32_t>(token);
  // A short spin catches a peer that is about to write, without a syscall.
  for (int i = 0; i < 2000; ++i) {
    if (h->doorbell.load(std::memory_order_acquire) != expected) return absl::OkStatus();
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  h->sleepers.fetch_add(1, std::memory_order_seq_cst);
  absl::Status status;
  for (;;) {
    if (h->doorbell.load(std::memory_order_seq_cst) != expected) break;
    const absl::Time now = absl::Now();
    if (now >= until) break;
    const absl::Duration slice = std::min(until - now, absl::Milliseconds(100));
    const timespec ts = absl::ToTimespec(slice);
    const long rc = futex(&h->doorbell, FUTEX_WAIT, expected, &ts);
    if (rc == 0 || errno == EAGAIN || errno == EINTR) continue;
    if (errno != ETIMEDOUT) {
      status = absl::InternalError(absl::StrCat("futex wait: ", net::errno_string(errno)));
      break;
    }
    // Nothing for a while: are the peers we wait for still there?
    for (const Interest& i : interests) {
      if (kill(pids_[i.peer], 0) != 0 && errno == ESRCH) {
        status = absl::UnavailableError(absl::StrCat(describe_peer(i.peer),
                                                     " has exited (shared-memory transport)"));
        break;
      }
    }
    if (!status.ok()) break;
  }
  h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  return status;
}

void ShmTransport::wake() { ring_doorbell(rank_); }

}  // namespace colossal::comm::builtin
