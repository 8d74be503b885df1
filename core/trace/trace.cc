#include "core/trace/trace.h"

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "core/status/cuda_check.h"
#include "nlohmann/json.hpp"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::core::trace {
namespace {

using Clock = std::chrono::steady_clock;

struct HostEvent {
  const char* category;
  std::string name;
  int64_t thread;
  double begin_us, end_us = -1;
};

// A span on a stream: two timing events, read when the trace is written.
struct DeviceEvent {
  const char* category;
  std::string name;
  int device;
  CUstream_st* stream;
  CUevent_st* begin = nullptr;
  CUevent_st* end = nullptr;
};

// Per device: an event that completed at a known host time, so the device
// spans' elapsed times from it land on the host timeline.
struct Anchor {
  CUevent_st* event = nullptr;
  double host_us = 0;
};

struct Trace {
  std::mutex mu;
  int process = 0;
  int64_t starter = 0;  // the thread that started the trace
  uint64_t generation = 0;
  Clock::time_point t0;
  std::vector<HostEvent> host;
  std::vector<DeviceEvent> device;
  std::map<int, Anchor> anchors;
  std::map<std::pair<int, CUstream_st*>, int> streams;  // -> track number
};

std::atomic<bool> g_on{false};

Trace& state() {
  static Trace* t = new Trace();  // never destroyed: spans may end during exit
  return *t;
}

double now_us(const Trace& t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t.t0).count();
}

int64_t thread_number() {
  static std::atomic<int64_t> next{0};
  thread_local const int64_t mine = next++;
  return mine;
}

#if COLOSSAL_WITH_CUDA
void destroy_events(Trace& t) {
  for (DeviceEvent& e : t.device) {
    if (e.begin != nullptr) cudaEventDestroy(e.begin);
    if (e.end != nullptr) cudaEventDestroy(e.end);
  }
  for (auto& [device, a] : t.anchors) cudaEventDestroy(a.event);
}

// The anchor of `device` (mu held): an event on an idle stream of its own,
// waited for at once, so it completed at (about) the host time taken then.
Anchor& anchor(Trace& t, int device) {
  auto it = t.anchors.find(device);
  if (it != t.anchors.end()) return it->second;
  Anchor a;
  cudaStream_t idle = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&a.event));
  CUDA_CHECK(cudaEventRecord(a.event, idle));
  CUDA_CHECK(cudaEventSynchronize(a.event));
  a.host_us = now_us(t);
  CUDA_CHECK(cudaStreamDestroy(idle));
  return t.anchors.emplace(device, a).first->second;
}
#else
void destroy_events(Trace&) {}
#endif

}  // namespace

bool enabled() { return g_on.load(std::memory_order_relaxed); }

absl::Status start(int process) {
  Trace& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  if (g_on.load()) return absl::FailedPreconditionError("trace: a trace is running already");
  t.process = process;
  t.starter = thread_number();
  ++t.generation;
  t.t0 = Clock::now();
  t.host.clear();
  t.device.clear();
  t.anchors.clear();
  t.streams.clear();
  g_on.store(true);
  return absl::OkStatus();
}

int64_t events() {
  Trace& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  return static_cast<int64_t>(t.host.size() + t.device.size());
}

Span::Span(const char* category, std::string name, const Stream* stream) {
  if (!enabled()) return;
  Trace& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!g_on.load()) return;
  generation_ = t.generation;
#if COLOSSAL_WITH_CUDA
  if (stream != nullptr && stream->is_cuda()) {
    const int device = stream->device().index();
    DeviceGuard guard(stream->device());
    anchor(t, device);
    DeviceEvent e{category, name, device, stream->handle()};
    CUDA_CHECK(cudaEventCreate(&e.begin));
    CUDA_CHECK(cudaEventRecord(e.begin, stream->handle()));
    t.streams.emplace(std::make_pair(device, stream->handle()), static_cast<int>(t.streams.size()));
    device_ = static_cast<int64_t>(t.device.size());
    t.device.push_back(std::move(e));
  }
#endif
  host_ = static_cast<int64_t>(t.host.size());
  t.host.push_back({category, std::move(name), thread_number(), now_us(t)});
}

Span::~Span() {
  if (host_ < 0) return;
  Trace& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!g_on.load() || t.generation != generation_) return;  // stopped meanwhile: dropped
  t.host[host_].end_us = now_us(t);
#if COLOSSAL_WITH_CUDA
  if (device_ >= 0) {
    DeviceEvent& e = t.device[device_];
    DeviceGuard guard(Device::cuda(e.device));
    CUDA_CHECK(cudaEventCreate(&e.end));
    CUDA_CHECK(cudaEventRecord(e.end, e.stream));
  }
#endif
}

absl::Status stop_and_write(const std::string& path) {
  Trace& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!g_on.load()) return absl::FailedPreconditionError("trace: no trace is running");
  g_on.store(false);
  nlohmann::json events = nlohmann::json::array();
  const std::string process_name = absl::StrCat("rank ", t.process);
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", t.process},
                    {"args", {{"name", process_name}}}});
  std::map<int64_t, bool> threads;
  for (const HostEvent& e : t.host) {
    if (e.end_us < 0) continue;  // still open: dropped
    threads[e.thread] = true;
    events.push_back({{"ph", "X"}, {"cat", e.category}, {"name", e.name}, {"pid", t.process},
                      {"tid", e.thread}, {"ts", e.begin_us}, {"dur", e.end_us - e.begin_us}});
  }
  for (const auto& [thread, unused] : threads) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", t.process}, {"tid", thread},
                      {"args", {{"name", thread == t.starter
                                             ? std::string("host: the trace's thread")
                                             : absl::StrCat("host: thread ", thread)}}}});
  }
#if COLOSSAL_WITH_CUDA
  // Every span's end has happened (waited for through its own event: a
  // stream may be gone by now).
  for (const DeviceEvent& e : t.device) {
    if (e.end != nullptr) CUDA_CHECK(cudaEventSynchronize(e.end));
  }
  // Device tracks after the host threads: tid 1000 + the stream's number.
  for (const auto& [key, track] : t.streams) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", t.process}, {"tid", 1000 + track},
                      {"args", {{"name", absl::StrCat("cuda:", key.first, " stream ", track)}}}});
  }
  for (const DeviceEvent& e : t.device) {
    if (e.end == nullptr) continue;
    const Anchor& a = t.anchors.at(e.device);
    float begin_ms = 0, end_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&begin_ms, a.event, e.begin));
    CUDA_CHECK(cudaEventElapsedTime(&end_ms, a.event, e.end));
    events.push_back({{"ph", "X"}, {"cat", e.category}, {"name", e.name}, {"pid", t.process},
                      {"tid", 1000 + t.streams.at({e.device, e.stream})},
                      {"ts", a.host_us + 1000.0 * begin_ms},
                      {"dur", 1000.0 * (end_ms - begin_ms)}});
  }
#endif
  destroy_events(t);
  t.host.clear();
  t.device.clear();
  t.anchors.clear();
  t.streams.clear();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
    out.close();
    if (!out) {
      const std::string why = std::strerror(errno);
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat("trace: cannot write ", path, ": ", why));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("trace: cannot write ", path, ": ", why));
  }
  return absl::OkStatus();
}

}  // namespace colossal::core::trace
