#include "comm/process_group/work.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace colossal::comm {

bool Work::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return status_.has_value();
}

absl::Status Work::wait(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout == absl::InfiniteDuration()) {
    cv_.wait(lock, [&] { return status_.has_value(); });
  } else {
    const auto d = absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration()));
    if (!cv_.wait_for(lock, d, [&] { return status_.has_value(); })) {
      return absl::DeadlineExceededError(absl::StrCat(description_, " is still running after ",
                                                      absl::FormatDuration(timeout)));
    }
  }
  return *status_;
}

void Work::wait_stream(const core::Stream& stream) { (void)wait(); }

absl::Status Work::wait_on(const core::Stream& stream) {
  if (!stream.is_cuda()) return wait();
  wait_stream(stream);
  return absl::OkStatus();
}

absl::Status Work::status() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!status_) return absl::UnavailableError(absl::StrCat(description_, " is still running"));
  return *status_;
}

void Work::complete(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_) return;
    status_ = std::move(status);
  }
  cv_.notify_all();
}

std::optional<absl::Status> Work::completed_status() {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

}  // namespace colossal::comm
