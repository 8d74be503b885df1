// colossal::core — absl::Status plumbing: early-return macros and conversions.
//
// Debian's abseil (20220623) has Status and StatusOr but no RETURN_IF_ERROR
// macros; these are colossal's, written once. Library code returns
// absl::Status / absl::StatusOr<T> for anything a user can cause (principle 8 of
// docs/DESIGN.md) and adds context on the way up with annotate(), so the final
// message names what failed and where.
//
//   absl::StatusOr<Tensor> load_weights(const std::string& path) {
//     COLOSSAL_ASSIGN_OR_RETURN(Shape shape, read_shape(path));  // declares `shape`
//     COLOSSAL_ASSIGN_OR_RETURN(auto t, Tensor::empty(shape, DType::kF32, Stream::cpu()));
//     COLOSSAL_RETURN_IF_ERROR(annotate(read_into(path, t), "reading " + path));
//     return t;
//   }
//
// Kernel families (kernels/) return kernels::KernelStatus; from_kernel_status()
// turns one into an absl::Status with a context prefix.
#ifndef COLOSSAL_CORE_STATUS_STATUS_H_
#define COLOSSAL_CORE_STATUS_STATUS_H_

#include "absl/strings/string_view.h"
#include <optional>
#include <string>
#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common/status.h"

namespace colossal::core {

// `status` with "context: " prepended to its message; the code and payloads
// (an option key) are kept. An OK status is returned unchanged. Use it to
// leave a breadcrumb on the way up:
//   return annotate(s, "layer 3 (attention)");  // "layer 3 (attention): shape ..."
absl::Status annotate(const absl::Status& status, absl::string_view context);

// Errors about one option of the user's (a recipe key, a config field)
// carry the key beside the message, so a front end points at the line that
// set it without reading the message:
//   option_error("stage", "must be 1 or 2")  // InvalidArgument "stage must be 1 or 2", key "stage"
//   with_option_key(status, "n_head")        // `status` tagged, its message unchanged (OK stays OK)
//   option_key(status)                       // the key, if it has one
absl::Status option_error(absl::string_view key, absl::string_view why);
absl::Status with_option_key(absl::Status status, absl::string_view key);
std::optional<std::string> option_key(const absl::Status& status);

// The absl::Status for a kernel's result, with `context` (e.g. the op name)
// before the kernel's message: kInvalidArgument -> InvalidArgumentError,
// kUnsupported -> UnimplementedError, kCudaError -> InternalError naming the
// CUDA error code. An ok KernelStatus gives OkStatus().
absl::Status from_kernel_status(const kernels::KernelStatus& status, absl::string_view context);

namespace internal {
// Lets COLOSSAL_RETURN_IF_ERROR take a Status or a StatusOr<T>.
inline const absl::Status& as_status(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& as_status(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace internal

}  // namespace colossal::core

// Evaluates `expr` (an absl::Status or absl::StatusOr<T>) once; if it is not OK,
// returns its status from the enclosing function (which must return
// absl::Status or absl::StatusOr<U>).
#define COLOSSAL_RETURN_IF_ERROR(expr)                                          \
  do {                                                                          \
    const auto& colossal_status_value_ = (expr);                                \
    const ::absl::Status& colossal_status_ =                                    \
        ::colossal::core::internal::as_status(colossal_status_value_);          \
    if (ABSL_PREDICT_FALSE(!colossal_status_.ok())) return colossal_status_;    \
  } while (0)

#define COLOSSAL_STATUS_CONCAT_INNER_(a, b) a##b
#define COLOSSAL_STATUS_CONCAT_(a, b) COLOSSAL_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::StatusOr<T>) once; on error returns its status,
// otherwise moves the value into `lhs`, which may declare a variable
// (`auto t`, `Tensor t`) or name an existing one. `lhs` may not contain an
// unparenthesised comma (write `auto [a, b]` as two statements).
#define COLOSSAL_ASSIGN_OR_RETURN(lhs, expr) \
  COLOSSAL_ASSIGN_OR_RETURN_IMPL_(COLOSSAL_STATUS_CONCAT_(colossal_statusor_, __LINE__), lhs, expr)

#define COLOSSAL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)          \
  auto tmp = (expr);                                             \
  if (ABSL_PREDICT_FALSE(!tmp.ok())) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()

#endif  // COLOSSAL_CORE_STATUS_STATUS_H_
