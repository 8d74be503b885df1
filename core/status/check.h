// colossal::core — invariant checks that abort with file:line.
//
// For broken internal invariants and failed CUDA/cuBLAS/NCCL calls only
// (principle 8 of docs/DESIGN.md): anything a user can cause returns an
// absl::Status instead (core/status/status.h). A failed check prints
//   core/tensor/tensor.cc:120: check failed: offset + bytes <= size: view past the end
// to stderr and calls std::abort(), in every build mode (there is no debug-only
// variant).
//
//   COLOSSAL_CHECK(ptr != nullptr) << "allocator returned null for " << bytes << " bytes";
//   COLOSSAL_CHECK_EQ(a.rank(), 2) << "gemm operand";   // prints both values: "(3 vs 2)"
//   COLOSSAL_CHECK_OK(status);                          // prints the status
//   COLOSSAL_FATAL() << "unreachable dtype " << int(dtype);
//
// Library calls are checked with COLOSSAL_CHECK_LIBRARY_CALL, which prints the
// library's own error name and string; core/status/cuda_check.h builds
// CUDA_CHECK and CUBLAS_CHECK on it, and comm/ can build NCCL_CHECK the same way:
//   #define NCCL_CHECK(expr) COLOSSAL_CHECK_LIBRARY_CALL("NCCL", expr, ncclSuccess, ncclGetErrorString)
#ifndef COLOSSAL_CORE_STATUS_CHECK_H_
#define COLOSSAL_CORE_STATUS_CHECK_H_

#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/base/optimization.h"
#include "absl/status/status.h"

namespace colossal::core::internal {

// Collects a failure message and aborts in its destructor, printing
// "file:line: <what>" and, if anything was streamed, ": <streamed text>".
// Not for direct use.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, absl::string_view what);
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure();

  std::ostream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  std::string what_;
  std::ostringstream stream_;
};

// For COLOSSAL_CHECK_OP_: nullopt when compare(a, b), else "expr (a vs b)".
template <typename Compare, typename A, typename B>
std::optional<std::string> check_op_message(Compare compare, const A& a, const B& b,
                                            const char* expr) {
  if (ABSL_PREDICT_TRUE(compare(a, b))) return std::nullopt;
  std::ostringstream out;
  out << expr << " (" << a << " vs " << b << ")";
  return out.str();
}

// For COLOSSAL_CHECK_OK: nullopt when `status` is OK, else "expr: status".
std::optional<std::string> check_ok_message(const absl::Status& status, const char* expr);

// Prints "file:line: <library> error <code> (<name>): <message> in <expr>"
// and aborts. `name` may be null when the library has no name function.
[[noreturn]] void library_call_failed(const char* library, const char* expr, long long code,
                                      const char* name, const char* message, const char* file,
                                      int line);

// The name of an error code, when the library gives one (see cuda_check.h).
inline const char* no_error_name(long long) { return nullptr; }

}  // namespace colossal::core::internal

// Aborts with file:line and the condition's text unless `cond` holds; more
// context can be streamed: COLOSSAL_CHECK(n > 0) << "n = " << n;
#define COLOSSAL_CHECK(cond)          \
  while (ABSL_PREDICT_FALSE(!(cond))) \
  ::colossal::core::internal::CheckFailure(__FILE__, __LINE__, "check failed: " #cond).stream()

// Unconditional failure, for unreachable code.
#define COLOSSAL_FATAL() \
  ::colossal::core::internal::CheckFailure(__FILE__, __LINE__, "fatal error").stream()

// Comparisons that print both operands on failure (operands need operator<<).
// Each operand is evaluated exactly once.
#define COLOSSAL_CHECK_OP_(functor, op, a, b)                                             \
  while (std::optional<std::string> colossal_check_message_ =                             \
             ::colossal::core::internal::check_op_message(functor{}, (a), (b),            \
                                                          "check failed: " #a " " #op " " #b)) \
  ::colossal::core::internal::CheckFailure(__FILE__, __LINE__, *colossal_check_message_).stream()
#define COLOSSAL_CHECK_EQ(a, b) COLOSSAL_CHECK_OP_(std::equal_to<>, ==, a, b)
#define COLOSSAL_CHECK_NE(a, b) COLOSSAL_CHECK_OP_(std::not_equal_to<>, !=, a, b)
#define COLOSSAL_CHECK_LT(a, b) COLOSSAL_CHECK_OP_(std::less<>, <, a, b)
#define COLOSSAL_CHECK_LE(a, b) COLOSSAL_CHECK_OP_(std::less_equal<>, <=, a, b)
#define COLOSSAL_CHECK_GT(a, b) COLOSSAL_CHECK_OP_(std::greater<>, >, a, b)
#define COLOSSAL_CHECK_GE(a, b) COLOSSAL_CHECK_OP_(std::greater_equal<>, >=, a, b)

// Aborts, printing the status, unless `expr` (an absl::Status) is OK. For
// statuses that can only fail through a bug, and for tests.
#define COLOSSAL_CHECK_OK(expr)                                                             \
  while (std::optional<std::string> colossal_check_message_ =                               \
             ::colossal::core::internal::check_ok_message((expr), "check failed: " #expr " is OK")) \
  ::colossal::core::internal::CheckFailure(__FILE__, __LINE__, *colossal_check_message_).stream()

// Checks a library call that returns an error code: unless `expr` equals
// `success`, aborts printing file:line, the call's text, the code, and
// `error_string(code)` (a function returning const char*). Evaluates `expr` once.
#define COLOSSAL_CHECK_LIBRARY_CALL(library, expr, success, error_string) \
  COLOSSAL_CHECK_LIBRARY_CALL_NAMED(library, expr, success, ::colossal::core::internal::no_error_name, \
                                    error_string)

// As above, also printing `error_name(code)` (e.g. cudaGetErrorName).
#define COLOSSAL_CHECK_LIBRARY_CALL_NAMED(library, expr, success, error_name, error_string)     \
  do {                                                                                         \
    const auto colossal_library_result_ = (expr);                                              \
    if (ABSL_PREDICT_FALSE(colossal_library_result_ != (success))) {                           \
      ::colossal::core::internal::library_call_failed(                                         \
          library, #expr, static_cast<long long>(colossal_library_result_),                    \
          error_name(colossal_library_result_), error_string(colossal_library_result_),        \
          __FILE__, __LINE__);                                                                 \
    }                                                                                          \
  } while (0)

#endif  // COLOSSAL_CORE_STATUS_CHECK_H_
