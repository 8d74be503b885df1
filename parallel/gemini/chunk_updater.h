// colossal::parallel — a step's host-side chunk updates, run on worker
// threads in a chosen order so that the caller can go on and wait only for
// the chunk it needs next.
//
// Gemini's `cpu` and `auto` placements keep shards and their Adam state in
// host memory, where Adam updates them after the backward. Run inline, the
// next forward starts only when every host chunk is updated. Queued here in
// the order of the next forward's first uses, the forward's gather of chunk c
// waits for c alone, so the updates of later chunks overlap the device work
// and PCIe copies of earlier ones. With two lanes, two workers take the
// queue's jobs in turn as each finishes its last (gemini: lane 0 runs CPU
// Adam, lane 1 has the GPU update the pinned host state), so the faster
// worker simply takes more chunks.
//
//   ChunkUpdater updater;
//   updater.start(chunks, {{3, [&](int lane) { return adam(3, lane); }},
//                          {0, [&](int lane) { return adam(0, lane); }}}, /*lanes=*/2);
//   COLOSSAL_RETURN_IF_ERROR(updater.wait(3));   // chunk 3 is updated (0 may still run)
//   COLOSSAL_RETURN_IF_ERROR(updater.wait_all()); // before anything reads every chunk
//
// Contract: the jobs of one start() are taken in the given order by `lanes`
// worker threads, each running one job at a time and passing the job its
// lane index (0 .. lanes - 1); with one lane they run one after another on
// one thread. A job that fails stops the rest (jobs not yet taken count as
// finished; one running on another lane finishes); its error is returned by
// every wait until wait_all() returns it and clears it. start() requires the
// previous jobs finished (it waits for them); add() appends to them. The destructor waits for
// running jobs. Not for concurrent callers: one thread calls start / wait /
// ready.
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
  using Job = std::function<absl::Status(int lane)>;

  ChunkUpdater() = default;
  ChunkUpdater(const ChunkUpdater&) = delete;
  ChunkUpdater& operator=(const ChunkUpdater&) = delete;
  ~ChunkUpdater();

  // Queues `jobs` (chunk index in [0, chunks), its update), each chunk at most
  // once, for `lanes` (>= 1) workers. Waits for earlier jobs first; returns
  // their error, if any, without queueing (the state they left is not one to
  // update further).
  absl::Status start(int chunks, std::vector<std::pair<int, Job>> jobs, int lanes = 1);
  // Queues one more job for chunk c behind those queued, without waiting for
  // them (gemini: each gradient fold as its download is enqueued). When
  // nothing is queued or running, as start() with that one job; otherwise
  // `chunks` and `lanes` must be those of the jobs queued. c must not be
  // queued or running. Returns a failed job's error without queueing, as
  // start() does (wait_all() clears it).
  absl::Status add(int chunks, int c, Job job, int lanes = 1);
  // Blocks until chunk c has no queued or running job. The error of a failed job.
  absl::Status wait(int c);
  // Blocks until no job is queued or running; returns and clears the error.
  absl::Status wait_all();
  // Whether chunk c has no queued or running job (does not block).
  bool ready(int c);

 private:
  void run(int lane);
  // Starts workers up to lanes_ (mu_ held).
  void start_workers();

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::pair<int, Job>> queue_;
  std::vector<char> pending_;  // per chunk: queued or running
  int busy_ = 0;               // jobs queued or running
  absl::Status error_;
  bool stop_ = false;
  int lanes_ = 1;                     // the workers taking the current jobs
  std::vector<std::thread> workers_;  // started as start() first asks for them
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_GEMINI_CHUNK_UPDATER_H_
