// gemm(): validation of the tensors and options, then the CPU or CUDA backend.
#include "core/gemm/gemm.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/gemm/gemm_internal.h"
#include "core/status/status.h"

namespace colossal::core::gemm {

const char* epilogue_name(Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::kNone: return "none";
    case Epilogue::kBias: return "bias";
    case Epilogue::kBiasGelu: return "bias_gelu";
    case Epilogue::kDGelu: return "dgelu";
  }
  return "unknown";
}

namespace {

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return absl::StrCat(dtype_name(t.dtype()), " ", t.shape().to_string(), " on ",
                      t.device().to_string());
}

bool overlaps(const Tensor& x, const Tensor& y) {
  if (x.storage() != y.storage() || x.nbytes() == 0 || y.nbytes() == 0) return false;
  return x.byte_offset() < y.byte_offset() + y.nbytes() &&
         y.byte_offset() < x.byte_offset() + x.nbytes();
}

bool supported_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}

}  // namespace

namespace internal {

AlgoAction choose_algo_action(const std::optional<MatmulAlgo>& cached, GemmAutotune autotune,
                              bool capturing) {
  const bool tune = autotune != GemmAutotune::kOff;
  if (cached.has_value()) {
    if (cached->source != MatmulAlgoSource::kProvisional || !tune || capturing) {
      return AlgoAction::kUseCached;
    }
    return AlgoAction::kAutotune;
  }
  if (!tune) return AlgoAction::kHeuristic;
  return capturing ? AlgoAction::kProvisional : AlgoAction::kAutotune;
}

bool cublas_can_run(const GemmProblem& p) {
  return p.epilogue == Epilogue::kNone && p.bias == nullptr && p.gelu_input == nullptr &&
         p.addend == nullptr && supported_dtype(p.dtype);
}

namespace {
std::atomic<CudaLibraryChoice> g_cuda_library{CudaLibraryChoice::kAuto};
}  // namespace

void set_cuda_library_for_testing(CudaLibraryChoice choice) { g_cuda_library.store(choice); }
CudaLibraryChoice cuda_library_for_testing() { return g_cuda_library.load(); }

int fastest_candidate(const float* times_ms, int count) {
  int best = -1;
  for (int i = 0; i < count; ++i) {
    const float t = times_ms[i];
    if (!std::isfinite(t) || t < 0) continue;
    if (best < 0 || t < times_ms[best]) best = i;
  }
  return best;
}

}  // namespace internal

absl::Status gemm(Context& ctx, const Tensor& a, const Tensor& b, Tensor& c,
                  const GemmOptions& options) {
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm(a: ", describe(a), options.trans_a ? " (transposed)" : "", ", b: ", describe(b),
        options.trans_b ? " (transposed)" : "", ", c: ", describe(c), "): ", why));
  };
  if (!a.defined() || !b.defined() || !c.defined()) return error("every operand must be defined");
  const int rank = c.rank();
  if (rank != 2 && rank != 3) return error("c must be 2-D [m, n] or 3-D [batch, m, n]");
  if (a.rank() != rank || b.rank() != rank) {
    return error(absl::StrCat("a, b and c must all be 2-D or all 3-D (got ranks ", a.rank(), ", ",
                              b.rank(), ", ", rank, "); reshape a batched operand to 2-D to ",
                              "share one matrix across the batch"));
  }
  if (a.dtype() != b.dtype() || a.dtype() != c.dtype()) return error("dtypes differ");
  if (!supported_dtype(c.dtype())) {
    return error(absl::StrCat("dtype ", dtype_name(c.dtype()),
                              " is not supported (float32, float64, float16, bfloat16)"));
  }
  for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&c)}) {
    if (t->device() != ctx.device()) {
      return error(absl::StrCat("operands must be on the context's device ",
                                ctx.device().to_string()));
    }
  }
  const int64_t batch = rank == 3 ? c.dim(0) : 1;
  if (rank == 3 && (a.dim(0) != batch || b.dim(0) != batch)) {
    return error(absl::StrCat("batch sizes differ (", a.dim(0), ", ", b.dim(0), ", ", batch, ")"));
  }
  const int64_t m = options.trans_a ? a.dim(-1) : a.dim(-2);
  const int64_t ka = options.trans_a ? a.dim(-2) : a.dim(-1);
  const int64_t kb = options.trans_b ? b.dim(-1) : b.dim(-2);
  const int64_t n = options.trans_b ? b.dim(-2) : b.dim(-1);
  if (ka != kb) {
    return error(absl::StrCat("inner dimensions differ: op(a) is [", m, ", ", ka, "], op(b) is [",
                              kb, ", ", n, "]"));
  }
  if (c.dim(-2) != m || c.dim(-1) != n) {
    return error(absl::StrCat("c must be [", m, ", ", n, "] for op(a) [", m, ", ", ka,
                              "] times op(b) [", kb, ", ", n, "]"));
  }
  constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();
  if (m > kMaxDim || n > kMaxDim || ka > kMaxDim || batch > kMaxDim) {
    return error("a dimension exceeds 2^31 - 1");
  }
  if (overlaps(c, a) || overlaps(c, b)) return error("c overlaps an input");

  const Tensor* bias = options.bias;
  const Tensor* aux = options.gelu_input;
  const char* epilogue = epilogue_name(options.epilogue);
  const bool has_bias =
      options.epilogue == Epilogue::kBias || options.epilogue == Epilogue::kBiasGelu;
  if (!has_bias) {
    if (bias != nullptr) return error("a bias needs the bias or bias_gelu epilogue");
  } else if (bias == nullptr || !bias->defined()) {
    return error(absl::StrCat("the ", epilogue, " epilogue needs a bias"));
  } else if (bias->rank() != 1 || bias->dim(0) != n || bias->dtype() != c.dtype() ||
             bias->device() != ctx.device()) {
    return error(absl::StrCat("the bias must be ", dtype_name(c.dtype()), " [", n, "] on ",
                              ctx.device().to_string(), ", not ", describe(*bias)));
  }
  if (options.epilogue == Epilogue::kDGelu) {
    if (aux == nullptr) return error("the dgelu epilogue reads gelu_input, which is missing");
    if (options.beta != 0.0) {
      return error(absl::StrCat("the dgelu epilogue writes C, so beta must be 0 (got ",
                                options.beta, ")"));
    }
  }
  if (aux != nullptr) {
    if (options.epilogue != Epilogue::kBiasGelu && options.epilogue != Epilogue::kDGelu) {
      return error("gelu_input belongs to the bias_gelu and dgelu epilogues");
    }
    if (!aux->defined() || aux->shape() != c.shape() || aux->dtype() != c.dtype() ||
        aux->device() != ctx.device()) {
      return error(absl::StrCat("gelu_input must be ", dtype_name(c.dtype()), " ",
                                c.shape().to_string(), " like c, not ", describe(*aux)));
    }
    if (n % 8 != 0) {
      return error(absl::StrCat("gelu_input needs n (", n, ") to be a multiple of 8"));
    }
    if (overlaps(*aux, a) || overlaps(*aux, b) || overlaps(*aux, c)) {
      return error("gelu_input overlaps another operand");
    }
  }

  const Tensor* addend = options.addend;
  if (addend != nullptr) {
    if (options.beta == 0.0) return error("an addend needs beta != 0 (beta 0 reads no C)");
    if (!addend->defined() || addend->shape() != c.shape() || addend->dtype() != c.dtype() ||
        addend->device() != ctx.device()) {
      return error(absl::StrCat("the addend must be ", dtype_name(c.dtype()), " ",
                                c.shape().to_string(), " like c, not ", describe(*addend)));
    }
    const bool is_c = addend->storage() == c.storage() && addend->byte_offset() == c.byte_offset();
    if (!is_c && overlaps(*addend, c)) return error("the addend overlaps c without being c");
    if (is_c) addend = nullptr;  // plain beta * C, in place
  }

  internal::GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = ka;
  p.batch = batch;
  p.dtype = c.dtype();
  p.trans_a = options.trans_a;
  p.trans_b = options.trans_b;
  p.alpha = options.alpha;
  p.beta = options.beta;
  p.allow_tf32 = options.allow_tf32;
  p.varying_size = options.varying_size;
  p.epilogue = options.epilogue;
  p.a = a.raw_data();
  p.b = b.raw_data();
  p.c = c.raw_data();
  p.addend = addend ? addend->raw_data() : nullptr;
  p.bias = bias ? bias->raw_data() : nullptr;
  p.gelu_input = aux ? aux->raw_data() : nullptr;
  if (m == 0 || n == 0 || batch == 0) return absl::OkStatus();

  if (ctx.device().is_cpu()) {
    // The CPU BLAS works in place: C takes the addend first.
    if (addend != nullptr) {
      std::memcpy(c.raw_data(), addend->raw_data(), c.nbytes());
      p.addend = nullptr;
    }
    return internal::run_cpu(p);
  }
#if COLOSSAL_WITH_CUDA
  return internal::run_cuda(ctx, p);
#else
  return absl::FailedPreconditionError("gemm on a CUDA context in a build without CUDA");
#endif
}

absl::StatusOr<Tensor> matmul(Context& ctx, const Tensor& a, const Tensor& b,
                              const GemmOptions& options) {
  if (options.beta != 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul allocates its result, so beta must be 0 (got ", options.beta,
                     "); use gemm() to accumulate into an existing tensor"));
  }
  if (!a.defined() || !b.defined() || a.rank() != b.rank() || (a.rank() != 2 && a.rank() != 3)) {
    return absl::InvalidArgumentError(absl::StrCat("matmul(a: ", describe(a), ", b: ", describe(b),
                                                   "): a and b must both be 2-D or both 3-D"));
  }
  const int64_t m = options.trans_a ? a.dim(-1) : a.dim(-2);
  const int64_t n = options.trans_b ? b.dim(-2) : b.dim(-1);
  Shape shape = a.rank() == 3 ? Shape{a.dim(0), m, n} : Shape{m, n};
  COLOSSAL_ASSIGN_OR_RETURN(Tensor c, Tensor::empty(shape, a.dtype(), ctx.compute_stream()));
  COLOSSAL_RETURN_IF_ERROR(gemm(ctx, a, b, c, options));
  return c;
}

}  // namespace colossal::core::gemm
