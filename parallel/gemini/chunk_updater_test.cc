#include "parallel/gemini/chunk_updater.h"

#include <atomic>
#include <future>
#include <vector>

#include "gtest/gtest.h"

namespace colossal::parallel {
namespace {

TEST(ChunkUpdaterTest, RunsJobsInTheGivenOrderOnOneThread) {
  ChunkUpdater updater;
  std::vector<int> ran;  // written by the worker only, read after wait_all
  std::vector<std::pair<int, ChunkUpdater::Job>> jobs;
  for (int c : {2, 0, 3, 1}) {
    jobs.emplace_back(c, [&ran, c](int) {
      ran.push_back(c);
      return absl::OkStatus();
    });
  }
  ASSERT_TRUE(updater.start(4, std::move(jobs)).ok());
  ASSERT_TRUE(updater.wait_all().ok());
  EXPECT_EQ(ran, (std::vector<int>{2, 0, 3, 1}));
}

// Two lanes: while one lane holds the first job, the other takes every later
// one in order; each job learns its lane.
TEST(ChunkUpdaterTest, TwoLanesTakeTheQueueInTurn) {
  ChunkUpdater updater;
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::promise<int> first_lane;
  std::vector<std::pair<int, int>> others;  // (chunk, lane): written by the free lane only
  std::vector<std::pair<int, ChunkUpdater::Job>> jobs;
  jobs.emplace_back(4, [&, gate](int lane) {  // held until the others are done
    first_lane.set_value(lane);
    gate.wait();
    return absl::OkStatus();
  });
  for (int c : {2, 0, 3, 1}) {
    jobs.emplace_back(c, [&others, c](int lane) {
      others.emplace_back(c, lane);
      return absl::OkStatus();
    });
  }
  ASSERT_TRUE(updater.start(5, std::move(jobs), /*lanes=*/2).ok());
  const int held = first_lane.get_future().get();
  ASSERT_TRUE(held == 0 || held == 1);
  ASSERT_TRUE(updater.wait(1).ok());  // the last of the others, while the held lane waits
  const int free_lane = 1 - held;
  EXPECT_EQ(others, (std::vector<std::pair<int, int>>{
                        {2, free_lane}, {0, free_lane}, {3, free_lane}, {1, free_lane}}));
  EXPECT_FALSE(updater.ready(4));
  release.set_value();
  ASSERT_TRUE(updater.wait_all().ok());
  EXPECT_TRUE(updater.ready(4));
  EXPECT_EQ(updater.start(1, {}, /*lanes=*/0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChunkUpdaterTest, WaitReturnsWhenItsChunkIsDoneWhileLaterOnesRun) {
  ChunkUpdater updater;
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> first_done{false};
  std::vector<std::pair<int, ChunkUpdater::Job>> jobs;
  jobs.emplace_back(1, [&](int) {
    first_done = true;
    return absl::OkStatus();
  });
  jobs.emplace_back(0, [gate](int) {  // held until the test releases it
    gate.wait();
    return absl::OkStatus();
  });
  ASSERT_TRUE(updater.start(2, std::move(jobs)).ok());
  ASSERT_TRUE(updater.wait(1).ok());
  EXPECT_TRUE(first_done);
  EXPECT_TRUE(updater.ready(1));
  EXPECT_FALSE(updater.ready(0));
  release.set_value();
  ASSERT_TRUE(updater.wait(0).ok());
  EXPECT_TRUE(updater.ready(0));
  EXPECT_TRUE(updater.ready(7));  // never queued
}

TEST(ChunkUpdaterTest, AFailedJobStopsTheRestAndEveryWaitReportsIt) {
  ChunkUpdater updater;
  std::atomic<int> after{0};
  std::vector<std::pair<int, ChunkUpdater::Job>> jobs;
  jobs.emplace_back(0, [](int) { return absl::InternalError("chunk 0 broke"); });
  jobs.emplace_back(1, [&](int) {
    ++after;
    return absl::OkStatus();
  });
  ASSERT_TRUE(updater.start(2, std::move(jobs)).ok());
  EXPECT_EQ(updater.wait(1).message(), "chunk 0 broke");
  EXPECT_EQ(after.load(), 0);
  EXPECT_EQ(updater.wait(0).message(), "chunk 0 broke");
  EXPECT_EQ(updater.wait_all().message(), "chunk 0 broke");
  EXPECT_TRUE(updater.wait_all().ok());  // cleared
  std::vector<std::pair<int, ChunkUpdater::Job>> again;
  again.emplace_back(1, [&](int) {
    ++after;
    return absl::OkStatus();
  });
  ASSERT_TRUE(updater.start(2, std::move(again)).ok());
  ASSERT_TRUE(updater.wait_all().ok());
  EXPECT_EQ(after.load(), 1);
}

TEST(ChunkUpdaterTest, StartReportsAnEarlierFailureAndQueuesNothing) {
  ChunkUpdater updater;
  std::vector<std::pair<int, ChunkUpdater::Job>> jobs;
  jobs.emplace_back(0, [](int) { return absl::InternalError("broke"); });
  ASSERT_TRUE(updater.start(1, std::move(jobs)).ok());
  bool ran = false;
  std::vector<std::pair<int, ChunkUpdater::Job>> next;
  next.emplace_back(0, [&](int) {
    ran = true;
    return absl::OkStatus();
  });
  EXPECT_EQ(updater.start(1, std::move(next)).message(), "broke");
  EXPECT_TRUE(updater.wait_all().ok());
  EXPECT_FALSE(ran);
}

TEST(ChunkUpdaterTest, RejectsAChunkOutOfRangeOrTwice) {
  ChunkUpdater updater;
  auto ok = [](int) { return absl::OkStatus(); };
  std::vector<std::pair<int, ChunkUpdater::Job>> twice = {{0, ok}, {0, ok}};
  EXPECT_EQ(updater.start(2, std::move(twice)).code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::pair<int, ChunkUpdater::Job>> outside = {{2, ok}};
  EXPECT_EQ(updater.start(2, std::move(outside)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(updater.wait_all().ok());
  EXPECT_TRUE(updater.ready(0));
}

// add(): jobs queued one at a time while earlier ones run, taken in order;
// wait(c) covers each; a failure is reported by the next add, which queues
// nothing, until wait_all() clears it.
TEST(ChunkUpdaterTest, AddQueuesBehindRunningJobsWithoutWaiting) {
  ChunkUpdater updater;
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::vector<int> ran;  // written by the worker only
  ASSERT_TRUE(updater.add(4, 2, [&, gate](int) {
    gate.wait();  // held: the adds below must not wait for it
    ran.push_back(2);
    return absl::OkStatus();
  }).ok());
  for (int c : {0, 3}) {
    ASSERT_TRUE(updater.add(4, c, [&ran, c](int) {
      ran.push_back(c);
      return absl::OkStatus();
    }).ok());
  }
  EXPECT_FALSE(updater.ready(0));
  EXPECT_EQ(updater.add(4, 3, [](int) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kInvalidArgument);  // queued already
  EXPECT_EQ(updater.add(5, 1, [](int) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kInvalidArgument);  // another layout while jobs run
  release.set_value();
  ASSERT_TRUE(updater.wait(3).ok());
  EXPECT_EQ(ran, (std::vector<int>{2, 0, 3}));

  ASSERT_TRUE(updater.add(4, 1, [](int) { return absl::InternalError("fold failed"); }).ok());
  EXPECT_EQ(updater.wait(1).code(), absl::StatusCode::kInternal);
  bool ran_after = false;
  EXPECT_EQ(updater.add(4, 0, [&](int) {
    ran_after = true;
    return absl::OkStatus();
  }).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(updater.wait_all().code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(ran_after);
  ASSERT_TRUE(updater.add(4, 0, [&](int) {
    ran_after = true;
    return absl::OkStatus();
  }).ok());
  ASSERT_TRUE(updater.wait_all().ok());
  EXPECT_TRUE(ran_after);
}

TEST(ChunkUpdaterTest, DestructionWaitsForRunningJobs) {
  std::atomic<bool> finished{false};
  {
    ChunkUpdater updater;
    std::vector<std::pair<int, ChunkUpdater::Job>> jobs;
    jobs.emplace_back(0, [&](int) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      finished = true;
      return absl::OkStatus();
    });
    ASSERT_TRUE(updater.start(1, std::move(jobs)).ok());
  }
  EXPECT_TRUE(finished);
}

}  // namespace
}  // namespace colossal::parallel
