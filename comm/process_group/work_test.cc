// Work: completion, waiting with a timeout, first completion wins.
#include "comm/process_group/work.h"

#include <gtest/gtest.h>

#include <thread>

namespace colossal::comm {
namespace {

TEST(WorkTest, PendingThenCompleted) {
  Work w("all_reduce #0 (sum, float32 x 4 on cpu)");
  EXPECT_FALSE(w.is_completed());
  absl::Status pending = w.status();
  EXPECT_TRUE(absl::IsUnavailable(pending));
  EXPECT_NE(pending.message().find("still running"), std::string::npos);
  absl::Status waited = w.wait(absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(waited)) << waited;
  EXPECT_NE(waited.message().find("all_reduce #0"), std::string::npos);
  w.complete(absl::OkStatus());
  EXPECT_TRUE(w.is_completed());
  EXPECT_TRUE(w.wait().ok());
  EXPECT_TRUE(w.status().ok());
}

TEST(WorkTest, WaitWakesWhenAnotherThreadCompletes) {
  Work w("barrier #1");
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(30));
    w.complete(absl::InternalError("boom"));
  });
  absl::Status s = w.wait();
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  w.complete(absl::OkStatus());  // ignored: the first result stays
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInternal);
}

TEST(WorkTest, WaitStreamOnHostWorkWaits) {
  Work w("broadcast #2");
  w.complete(absl::OkStatus());
  w.wait_stream(core::Stream::cpu());
  EXPECT_TRUE(w.is_completed());
}

}  // namespace
}  // namespace colossal::comm
