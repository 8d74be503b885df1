#include "tests/fuzz/fuzz_target.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int colossal_fuzz_status_code = 0;  // extern "C" by its declaration

namespace colossal::fuzz {

MemoryFile::MemoryFile(const uint8_t* data, size_t size) {
  fd_ = ::memfd_create("colossal-fuzz", MFD_CLOEXEC);
  Check(fd_ >= 0, "memfd_create failed");
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, data + done, size - done);
    Check(n > 0, "write to memfd failed");
    done += static_cast<size_t>(n);
  }
  path_ = "/proc/self/fd/" + std::to_string(fd_);
}

MemoryFile::~MemoryFile() {
  if (fd_ >= 0) ::close(fd_);
}

void Fail(std::string_view what) {
  std::fprintf(stderr, "fuzz target: contract violated: %.*s\n", static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  std::abort();
}

void RecordStatus(const absl::Status& status, std::initializer_list<absl::StatusCode> allowed,
                  std::string_view prefix) {
  colossal_fuzz_status_code = static_cast<int>(status.code());
  if (status.ok()) return;
  bool known = false;
  for (absl::StatusCode code : allowed) known = known || status.code() == code;
  const std::string text = status.ToString();
  if (!known) Fail("unexpected error kind: " + text);
  const absl::string_view message = status.message();
  const std::string_view m(message.data(), message.size());
  if (!m.starts_with(prefix) || m.size() <= prefix.size() + 8) {
    Fail("error message does not name the file and say what is wrong: " + text);
  }
}

}  // namespace colossal::fuzz
