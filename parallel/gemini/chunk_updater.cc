#include "parallel/gemini/chunk_updater.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace colossal::parallel {

ChunkUpdater::~ChunkUpdater() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return busy_ == 0; });
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& w : workers_) w.join();
}

absl::Status ChunkUpdater::start(int chunks, std::vector<std::pair<int, Job>> jobs, int lanes) {
  absl::Status earlier = wait_all();
  if (!earlier.ok()) return earlier;
  if (lanes < 1) return absl::InvalidArgumentError(absl::StrCat("chunk updater: lanes must be >= 1, got ", lanes));
  std::unique_lock<std::mutex> lock(mu_);
  pending_.assign(static_cast<size_t>(chunks), 0);
  for (auto& [c, job] : jobs) {
    if (c < 0 || c >= chunks || pending_[c]) {
      queue_.clear();
      pending_.assign(static_cast<size_t>(chunks), 0);
      return absl::InvalidArgumentError(
          absl::StrCat("chunk updater: chunk ", c, " is out of [0, ", chunks, ") or queued twice"));
    }
    pending_[c] = 1;
    queue_.emplace_back(c, std::move(job));
  }
  busy_ = static_cast<int>(queue_.size());
  lanes_ = lanes;
  if (busy_ > 0) start_workers();
  lock.unlock();
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status ChunkUpdater::add(int chunks, int c, Job job, int lanes) {
  if (lanes < 1) return absl::InvalidArgumentError(absl::StrCat("chunk updater: lanes must be >= 1, got ", lanes));
  std::unique_lock<std::mutex> lock(mu_);
  if (!error_.ok()) return error_;
  if (busy_ == 0) {
    pending_.assign(static_cast<size_t>(std::max(chunks, 0)), 0);
    lanes_ = lanes;
  } else if (static_cast<int>(pending_.size()) != chunks || lanes != lanes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk updater: add() for ", chunks, " chunks on ", lanes, " lanes while jobs for ",
        pending_.size(), " chunks on ", lanes_, " run"));
  }
  if (c < 0 || c >= chunks || pending_[c]) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk updater: chunk ", c, " is out of [0, ", chunks, ") or queued twice"));
  }
  pending_[c] = 1;
  queue_.emplace_back(c, std::move(job));
  ++busy_;
  start_workers();
  lock.unlock();
  changed_.notify_all();
  return absl::OkStatus();
}

void ChunkUpdater::start_workers() {
  while (static_cast<int>(workers_.size()) < lanes_) {
    const int lane = static_cast<int>(workers_.size());
    workers_.emplace_back([this, lane] { run(lane); });
  }
}

void ChunkUpdater::run(int lane) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || (!queue_.empty() && lane < lanes_); });
    if (stop_) return;  // stop_ is set only once nothing is queued or running
    auto [c, job] = std::move(queue_.front());
    queue_.pop_front();
    absl::Status s;
    if (error_.ok()) {  // after a failure the rest only count as finished
      lock.unlock();
      s = job(lane);
      lock.lock();
    }
    if (!s.ok() && error_.ok()) error_ = s;
    pending_[c] = 0;
    --busy_;
    changed_.notify_all();
  }
}

absl::Status ChunkUpdater::wait(int c) {
  std::unique_lock<std::mutex> lock(mu_);
  if (c >= 0 && static_cast<size_t>(c) < pending_.size()) {
    changed_.wait(lock, [&] { return pending_[c] == 0; });
  }
  return error_;
}

absl::Status ChunkUpdater::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return busy_ == 0; });
  absl::Status out = error_;
  error_ = absl::OkStatus();
  return out;
}

bool ChunkUpdater::ready(int c) {
  std::lock_guard<std::mutex> lock(mu_);
  return c < 0 || static_cast<size_t>(c) >= pending_.size() || pending_[c] == 0;
}

}  // namespace colossal::parallel
