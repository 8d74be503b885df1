// colossal::parallel — a step's host-side chunk updates, run on one worker
// thread in a chosen order so that the caller can go on and wait only for
// the chunk it needs next.
//
// Gemini's `cpu` and `auto` placements keep shards and their Adam state in
// host memory, where CPU Adam updates them after the backward. Run inline,
// the next forward starts only when every host chunk is updated. Queued here
// in the order of the next forward's first uses, the forward's gather of
// chunk c waits for c alone, so CPU Adam of later chunks overlaps the device
// work and PCIe copies of earlier ones.
//
//   ChunkUpdater updater;
//   updater.start(chunks, {{3, [&] { return adam(3); }}, {0, [&] { return adam(0); }}});
//   COLOSSAL_RETURN_IF_ERROR(updater.wait(3));   // chunk 3 is updated (0 may still run)
//   COLOSSAL_RETURN_IF_ERROR(updater.wait_all()); // before anything reads every chunk
//
// Contract: jobs of one start() run one after another, in the given order, on
// one thread. A job that fails stops the rest (they count as finished); its
// error is returned by every wait until wait_all() returns it and clears it.
// start() requires the previous jobs finished (it waits for them). The
// destructor waits for running jobs. Not for concurrent callers: one thread
// calls start / wait / ready.
#ifndef COLOSSAL_PARALLEL_GEMINI_CHUNK_UPDATER_H_
#define COLOSSAL_PARALLEL_GEMINI_CHUNK_UPDATER_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace colossal::parallel {

class ChunkUpdater {
 public:
  using Job = std::function<absl::Status()>;

  ChunkUpdater() = default;
  ChunkUpdater(const ChunkUpdater&) = delete;
  ChunkUpdater& operator=(const ChunkUpdater&) = delete;
  ~ChunkUpdater();

  // Queues `jobs` (chunk index in [0, chunks), its update), each chunk at most
  // once. Waits for earlier jobs first; returns their error, if any, without
  // queueing (the state they left is not one to update further).
  absl::Status start(int chunks, std::vector<std::pair<int, Job>> jobs);
  // Blocks until chunk c has no queued or running job. The error of a failed job.
  absl::Status wait(int c);
  // Blocks until no job is queued or running; returns and clears the error.
  absl::Status wait_all();
  // Whether chunk c has no queued or running job (does not block).
  bool ready(int c);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::pair<int, Job>> queue_;
  std::vector<char> pending_;  // per chunk: queued or running
  int busy_ = 0;               // jobs queued or running
  absl::Status error_;
  bool stop_ = false;
  std::thread worker_;  // started on the first start()
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_GEMINI_CHUNK_UPDATER_H_
