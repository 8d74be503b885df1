#include "core/status/check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace colossal::core::internal {

CheckFailure::CheckFailure(const char* file, int line, absl::string_view what)
    : file_(file), line_(line), what_(what) {}

CheckFailure::~CheckFailure() {
  const std::string extra = stream_.str();
  std::fprintf(stderr, "%s:%d: %s%s%s\n", file_, line_, what_.c_str(), extra.empty() ? "" : ": ",
               extra.c_str());
  std::fflush(stderr);
  std::abort();
}

std::optional<std::string> check_ok_message(const absl::Status& status, const char* expr) {
  if (ABSL_PREDICT_TRUE(status.ok())) return std::nullopt;
  return std::string(expr) + ": " + status.ToString();
}

void library_call_failed(const char* library, const char* expr, long long code, const char* name,
                         const char* message, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: %s error %lld%s%s%s: %s in %s\n", file, line, library, code,
               name ? " (" : "", name ? name : "", name ? ")" : "",
               message ? message : "(no message)", expr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace colossal::core::internal
