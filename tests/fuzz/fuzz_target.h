// colossal fuzz targets: what a libFuzzer-style target (io/*/..._fuzz.cc)
// shares with the replay driver (tests/fuzz/fuzz_driver.cc).
//
// A target defines the libFuzzer entry point and calls the parser on the
// bytes. It aborts (a crash: the driver or libFuzzer reports it and keeps the
// input) when the parser breaks its contract: a crash, an out-of-bounds read,
// an accepted input that violates the format's invariants, or a rejection
// that is not a clean absl error of the documented kinds. Otherwise it
// records the status code in colossal_fuzz_status_code, so the driver can
// check the expected outcome of the named seed files (README.md).
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     colossal::fuzz::MemoryFile file(data, size);          // a real fd path
//     absl::StatusOr<X> x = X::Open(file.path());
//     colossal::fuzz::RecordStatus(x.status(), {absl::StatusCode::kDataLoss, ...}, "x file '");
//     ...
//   }
#ifndef COLOSSAL_TESTS_FUZZ_FUZZ_TARGET_H_
#define COLOSSAL_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/status.h"

// The last input's outcome: 0 (OK) or an absl::StatusCode. Set by targets.
extern "C" int colossal_fuzz_status_code;

namespace colossal::fuzz {

// The input as an anonymous in-memory file (memfd), opened by path
// (/proc/self/fd/N): the parsers under test take paths and mmap them.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size);
  ~MemoryFile();
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Prints `what` and aborts.
[[noreturn]] void Fail(std::string_view what);
// Aborts unless `condition`.
inline void Check(bool condition, std::string_view what) {
  if (!condition) Fail(what);
}

// Records `status` in colossal_fuzz_status_code; aborts unless it is OK or a
// clean error: one of `allowed`, with a message that starts with `prefix`
// (the parser names the file) and says more than that.
void RecordStatus(const absl::Status& status, std::initializer_list<absl::StatusCode> allowed,
                  std::string_view prefix);

}  // namespace colossal::fuzz

#endif  // COLOSSAL_TESTS_FUZZ_FUZZ_TARGET_H_
