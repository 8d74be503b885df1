// core::trace: spans recorded only while a trace runs, nested and per thread,
// written as Chrome trace-event JSON that parses back; errors for a second
// start, a stop without start and an unwritable path (nothing left behind);
// on a GPU, a span over work on a stream lands on that stream's track with
// the work's duration.
#include "core/trace/trace.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "core/device/device.h"
#include "core/device/stream.h"
#include "nlohmann/json.hpp"
#include "tests/util/gpu_test.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::core::trace {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The complete ("X") event named `name`; null if none.
nlohmann::json find_event(const nlohmann::json& trace, const std::string& name) {
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == name) return e;
  }
  return nullptr;
}

TEST(Trace, RecordsNothingWhenOff) {
  { Span s("test", "ignored"); }
  EXPECT_FALSE(enabled());
  EXPECT_EQ(events(), 0);
}

TEST(Trace, NestedSpansPerThreadParseBack) {
  const std::string path = temp_path("trace_nested.json");
  ASSERT_TRUE(start(3).ok());
  EXPECT_TRUE(enabled());
  {
    Span outer("module", "forward outer");
    { Span inner("module", "forward \"inner\""); }  // quotes must be escaped
    std::thread worker([] { Span w("adam", "worker job"); });
    worker.join();
  }
  EXPECT_EQ(events(), 3);
  ASSERT_TRUE(stop_and_write(path).ok());
  EXPECT_FALSE(enabled());
  const nlohmann::json trace = read_json(path);
  const nlohmann::json outer = find_event(trace, "forward outer");
  const nlohmann::json inner = find_event(trace, "forward \"inner\"");
  const nlohmann::json worker = find_event(trace, "worker job");
  ASSERT_FALSE(outer.is_null());
  ASSERT_FALSE(inner.is_null());
  ASSERT_FALSE(worker.is_null());
  EXPECT_EQ(outer["pid"], 3);
  EXPECT_EQ(outer["cat"], "module");
  EXPECT_EQ(outer["tid"], inner["tid"]);
  EXPECT_NE(outer["tid"], worker["tid"]);
  const double ob = outer["ts"], od = outer["dur"], ib = inner["ts"], id = inner["dur"];
  EXPECT_LE(ob, ib);
  EXPECT_LE(ib + id, ob + od);
  EXPECT_GE(id, 0.0);
  int names = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) names += e["ph"] == "M" ? 1 : 0;
  EXPECT_GE(names, 3);  // the process and both threads
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Trace, SpanOpenAcrossStopIsDropped) {
  const std::string path = temp_path("trace_dropped.json");
  ASSERT_TRUE(start(0).ok());
  auto open = std::make_unique<Span>("module", "still open");
  { Span done("module", "closed"); }
  ASSERT_TRUE(stop_and_write(path).ok());
  open.reset();  // ends after the stop: nothing happens
  const nlohmann::json trace = read_json(path);
  EXPECT_TRUE(find_event(trace, "still open").is_null());
  EXPECT_FALSE(find_event(trace, "closed").is_null());
  // A new trace starts empty.
  ASSERT_TRUE(start(0).ok());
  EXPECT_EQ(events(), 0);
  ASSERT_TRUE(stop_and_write(path).ok());
}

TEST(Trace, Errors) {
  ASSERT_TRUE(start(0).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(start(0)));
  const std::string bad = temp_path("no_such_dir/trace.json");
  const absl::Status s = stop_and_write(bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(bad), std::string::npos) << s;
  EXPECT_FALSE(std::filesystem::exists(bad + ".tmp"));
  EXPECT_FALSE(enabled());
  EXPECT_TRUE(absl::IsFailedPrecondition(stop_and_write(temp_path("x.json"))));
}

#if COLOSSAL_WITH_CUDA
TEST(Trace, DeviceSpanTimesTheStreamsWork) {
  COLOSSAL_REQUIRE_GPU();
  absl::StatusOr<OwnedStream> owned = OwnedStream::create(Device::cuda(0));
  ASSERT_TRUE(owned.ok()) << owned.status();
  const Stream stream = owned->get();
  constexpr size_t kBytes = size_t{1} << 30;
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, kBytes), cudaSuccess);
  const std::string path = temp_path("trace_device.json");
  ASSERT_TRUE(start(0).ok());
  {
    Span s("copy", "memset 8 GiB", &stream);
    for (int i = 0; i < 8; ++i) {
      ASSERT_EQ(cudaMemsetAsync(buffer, i, kBytes, stream.handle()), cudaSuccess);
    }
  }
  ASSERT_TRUE(stop_and_write(path).ok());
  cudaFree(buffer);
  const nlohmann::json trace = read_json(path);
  int device_spans = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["name"] != "memset 8 GiB") continue;
    if (e["tid"].get<int>() >= 1000) {
      ++device_spans;
      // 8 GiB of writes take well over 0.5 ms on any GPU this runs on.
      EXPECT_GT(e["dur"].get<double>(), 500.0);
    }
  }
  EXPECT_EQ(device_spans, 1);
}
#endif

}  // namespace
}  // namespace colossal::core::trace
