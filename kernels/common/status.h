// colossal::kernels — the result every kernel function returns.
//
// Kernels are leaves: they do not depend on abseil or core/, so they report
// errors with this small value type. Messages are string literals (or CUDA's
// own static error strings), so a KernelStatus is cheap and never allocates.
//
//   KernelStatus s = reduce::reduce_into_cpu(dst, src, n, DType::kF32, ReduceOp::kSum);
//   if (!s.ok()) fprintf(stderr, "reduce: %s\n", s.message());
#ifndef COLOSSAL_KERNELS_COMMON_STATUS_H_
#define COLOSSAL_KERNELS_COMMON_STATUS_H_

namespace colossal::kernels {

class [[nodiscard]] KernelStatus {
 public:
  enum class Code : int {
    kOk = 0,
    kInvalidArgument,  // a pointer, size or option the caller got wrong
    kUnsupported,      // a valid request this kernel does not implement (e.g. a dtype)
    kCudaError,        // the CUDA runtime reported an error; see cuda_code()
  };

  constexpr KernelStatus() = default;

  static constexpr KernelStatus invalid_argument(const char* message) {
    return KernelStatus(Code::kInvalidArgument, 0, message);
  }
  static constexpr KernelStatus unsupported(const char* message) {
    return KernelStatus(Code::kUnsupported, 0, message);
  }
  // `cuda_code` is the cudaError_t value; `message` its cudaGetErrorString.
  static constexpr KernelStatus cuda_error(int cuda_code, const char* message) {
    return KernelStatus(Code::kCudaError, cuda_code, message);
  }

  constexpr bool ok() const { return code_ == Code::kOk; }
  constexpr Code code() const { return code_; }
  constexpr int cuda_code() const { return cuda_code_; }
  constexpr const char* message() const { return message_; }

 private:
  constexpr KernelStatus(Code code, int cuda_code, const char* message)
      : code_(code), cuda_code_(cuda_code), message_(message) {}

  Code code_ = Code::kOk;
  int cuda_code_ = 0;
  const char* message_ = "ok";
};

}  // namespace colossal::kernels

#endif  // COLOSSAL_KERNELS_COMMON_STATUS_H_
