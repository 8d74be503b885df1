// GEMM on every dtype, transpose, odd shape, batch, epilogue and alpha/beta,
// on the CPU and (with a GPU) CUDA, against a float64 reference computed on the
// CPU from the exact values stored in the inputs.
//
// Error measure: for each element, |got - ref| / scale with
//   scale = |alpha| sum_k |a_ik b_kj| + |beta c_ij| + |bias_j|,
// the magnitude the result is built from (the classical bound for a dot
// product's rounding error is proportional to it). Tolerances per dtype:
//   float64  1e-12  accumulation error ~ sqrt(k) 2^-53, k <= 511
//   float32  1e-5   fp32 accumulation: ~sqrt(k) 2^-24 = 1.3e-6 typical, ~8x headroom
//   tf32     1e-3   each input rounded to 10 mantissa bits: a product is off by at
//                   most 2 * 2^-11 = 9.8e-4 of |a b| (round to nearest), so the sum
//                   by at most that fraction of scale; random signs keep it far below
//   bfloat16 1e-2   inputs are exact bf16 values and products accumulate in fp32;
//                   the one rounding of the output costs up to 2^-8 = 3.9e-3 of
//                   |ref| <= scale (bf16 keeps 8 significant bits); 1e-2 (2.5 such
//                   roundings) leaves room for cuBLASLt's split-K reductions, which
//                   may round a partial sum to the output type
//   float16  2e-3   the same reasoning with 2^-11 = 4.9e-4 per rounding (4 roundings)
// The GELU epilogue is 1-Lipschitz-ish (|gelu'| <= 1.13), so the same bounds
// hold after it, scaled by 1.13 — except float64 on CUDA: cuBLASLt's GELU
// epilogue evaluates tanh with an approximation good to about 1e-10 (measured
// 1.2e-10 worst on an H100, 2026-11-22), so float64 GELU gets 5e-10 there.
#include "core/gemm/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/gemm/gemm_internal.h"
#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"

#if COLOSSAL_WITH_CUDA
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#endif

namespace colossal::core::gemm {
namespace {

using kernels::BFloat16;
using kernels::Half;

// GELU, tanh approximation, in float64: the reference, written independently
// of the implementation's.
double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Its derivative, through sech^2 u = 1 / cosh^2 u.
double gelu_grad(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double u = k * (x + 0.044715 * x * x * x);
  const double sech = 1.0 / std::cosh(u);
  return 0.5 * (1.0 + std::tanh(u)) + 0.5 * x * sech * sech * k * (1.0 + 3 * 0.044715 * x * x);
}

bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

struct Case {
  DType dtype = DType::kF32;
  bool tf32 = false;
  int64_t batch = 0;  // 0: 2-D operands
  int64_t m = 1, n = 1, k = 1;
  bool trans_a = false, trans_b = false;
  double alpha = 1.0, beta = 0.0;
  Epilogue epilogue = Epilogue::kNone;
  bool gelu_input = false;
  bool addend = false;   // beta's term reads a separate tensor; C is only written
  int64_t misalign = 0;  // start every operand this many elements into its storage

  std::string label() const {
    return absl::StrCat(dtype_name(dtype), tf32 ? "(tf32)" : "", " batch=", batch, " m=", m,
                        " n=", n, " k=", k, " ", trans_a ? "T" : "N", trans_b ? "T" : "N",
                        " alpha=", alpha, " beta=", beta, " epilogue=", epilogue_name(epilogue),
                        gelu_input ? "+aux" : "", addend ? " +addend" : "",
                        misalign ? absl::StrCat(" misalign=", misalign) : "");
  }
};

// The largest normalised error seen per dtype mode, printed after each test so
// a run shows how much room each tolerance leaves.
struct WorstErrors {
  std::map<std::string, double> by_mode;
  void note(const Case& c, double e) {
    double& w = by_mode[absl::StrCat(dtype_name(c.dtype), c.tf32 ? "(tf32)" : "")];
    w = std::max(w, e);
  }
  void print_and_reset(const std::string& where) {
    for (const auto& [mode, worst] : by_mode) {
      std::printf("  worst normalised error %-16s %-10s %.3g\n", where.c_str(), mode.c_str(), worst);
    }
    by_mode.clear();
  }
};
WorstErrors worst_errors;

double tolerance(const Case& c, bool on_cuda) {
  double tol = 0;
  switch (c.dtype) {
    case DType::kF64: tol = 1e-12; break;
    case DType::kF32: tol = c.tf32 ? 1e-3 : 1e-5; break;
    case DType::kBF16: tol = 1e-2; break;
    case DType::kF16: tol = 2e-3; break;
    default: ADD_FAILURE() << "no tolerance for " << dtype_name(c.dtype);
  }
  // GELU and its derivative scale the product by up to 1.13 (and cuBLASLt
  // evaluates them for float64 in less than float64's precision).
  const bool gelu = c.epilogue == Epilogue::kBiasGelu || c.epilogue == Epilogue::kDGelu;
  if (gelu && c.dtype == DType::kF64 && on_cuda) return 5e-10;
  return gelu ? 1.13 * tol : tol;
}

double get(const Tensor& host, int64_t i) {
  switch (host.dtype()) {
    case DType::kF32: return host.data<float>()[i];
    case DType::kF64: return host.data<double>()[i];
    case DType::kF16: return kernels::half_to_float(host.data<Half>()[i]);
    case DType::kBF16: return kernels::bfloat16_to_float(host.data<BFloat16>()[i]);
    default: ADD_FAILURE() << "unexpected dtype"; return 0;
  }
}

void put(const Tensor& host, int64_t i, double v) {
  switch (host.dtype()) {
    case DType::kF32: host.data<float>()[i] = static_cast<float>(v); break;
    case DType::kF64: host.data<double>()[i] = v; break;
    case DType::kF16: host.data<Half>()[i] = kernels::float_to_half(static_cast<float>(v)); break;
    case DType::kBF16:
      host.data<BFloat16>()[i] = kernels::float_to_bfloat16(static_cast<float>(v));
      break;
    default: ADD_FAILURE() << "unexpected dtype";
  }
}

// A host tensor `shape` of `dtype` viewed `misalign` elements into a larger
// storage, filled with `fill(i)`; the exact stored values go to `values`.
template <typename Fill>
Tensor host_tensor(const Shape& shape, DType dtype, int64_t misalign, Fill fill,
                   std::vector<double>* values) {
  absl::StatusOr<Tensor> storage =
      Tensor::empty({shape.numel() + misalign}, dtype, Stream::cpu());
  COLOSSAL_CHECK_OK(storage.status());
  absl::StatusOr<Tensor> flat = storage->slice(misalign, misalign + shape.numel());
  absl::StatusOr<Tensor> t = flat->reshape(shape.dims());
  COLOSSAL_CHECK_OK(t.status());
  if (values) values->resize(shape.numel());
  for (int64_t i = 0; i < shape.numel(); ++i) {
    put(*t, i, fill(i));
    if (values) (*values)[i] = get(*t, i);
  }
  return *t;
}

// The tensor on ctx's device (a misaligned copy keeps its misalignment).
Tensor on_device(Context& ctx, const Tensor& host, int64_t misalign) {
  if (ctx.device().is_cpu()) return host;
  absl::StatusOr<Tensor> storage =
      Tensor::empty({host.numel() + misalign}, host.dtype(), ctx.compute_stream());
  COLOSSAL_CHECK_OK(storage.status());
  absl::StatusOr<Tensor> t = storage->slice(misalign, misalign + host.numel())->reshape(host.shape().dims());
  COLOSSAL_CHECK_OK(t.status());
  COLOSSAL_CHECK_OK(t->copy_from(host, ctx.compute_stream()));
  return *t;
}

Tensor to_host(Context& ctx, const Tensor& t) {
  absl::StatusOr<Tensor> host = t.to(Device::cpu(), ctx.compute_stream());
  COLOSSAL_CHECK_OK(host.status());
  ctx.synchronize();
  return *host;
}

Shape shape_of(int64_t batch, int64_t rows, int64_t cols) {
  return batch > 0 ? Shape{batch, rows, cols} : Shape{rows, cols};
}

// What check() computed: C on the host, and each element's error scale.
struct Outcome {
  Tensor got;
  std::vector<double> scale;
};

// Runs one case on ctx and compares with the float64 reference. The inputs
// depend only on the case and the seed.
void check(Context& ctx, const Case& c, uint32_t seed, Outcome* outcome = nullptr) {
  SCOPED_TRACE(c.label() + " on " + ctx.device().to_string());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto random = [&](int64_t) { return uniform(rng); };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const int64_t batches = std::max<int64_t>(c.batch, 1);
  std::vector<double> a, b, c0, bias;
  const Shape a_shape = shape_of(c.batch, c.trans_a ? c.k : c.m, c.trans_a ? c.m : c.k);
  const Shape b_shape = shape_of(c.batch, c.trans_b ? c.n : c.k, c.trans_b ? c.k : c.n);
  const Shape c_shape = shape_of(c.batch, c.m, c.n);
  const Tensor ha = host_tensor(a_shape, c.dtype, c.misalign, random, &a);
  const Tensor hb = host_tensor(b_shape, c.dtype, c.misalign, random, &b);
  // beta == 0, or an addend: C must not be read, so it holds NaN (c0 then
  // holds the addend's values).
  std::vector<double> c_nan;
  const Tensor hc = host_tensor(
      c_shape, c.dtype, c.misalign,
      [&](int64_t i) { return c.beta == 0.0 || c.addend ? nan : random(i); },
      c.addend ? &c_nan : &c0);
  const Tensor haddend =
      c.addend ? host_tensor(c_shape, c.dtype, c.misalign, random, &c0) : Tensor();
  Tensor da = on_device(ctx, ha, c.misalign), db = on_device(ctx, hb, c.misalign);
  Tensor dc = on_device(ctx, hc, c.misalign);
  // A separate buffer (on the CPU, a copy: the host tensor is the reference).
  const Tensor daddend =
      c.addend ? on_device(ctx, *haddend.to(Device::cpu(), Stream::cpu()), c.misalign) : Tensor();
  Tensor dbias, daux;
  std::vector<double> aux_in;  // kDGelu: the pre-GELU values it reads
  GemmOptions options;
  options.trans_a = c.trans_a;
  options.trans_b = c.trans_b;
  options.alpha = c.alpha;
  options.beta = c.beta;
  options.allow_tf32 = c.tf32;
  options.epilogue = c.epilogue;
  if (c.addend) options.addend = &daddend;
  const bool has_bias = c.epilogue == Epilogue::kBias || c.epilogue == Epilogue::kBiasGelu;
  const bool reads_aux = c.epilogue == Epilogue::kDGelu;
  if (has_bias) {
    dbias = on_device(ctx, host_tensor({c.n}, c.dtype, c.misalign, random, &bias), c.misalign);
    options.bias = &dbias;
  }
  if (reads_aux) {
    // Pre-GELU values over [-4, 4], where GELU's derivative goes through its
    // whole range (about -0.17 to 1.13).
    daux = on_device(ctx, host_tensor(c_shape, c.dtype, c.misalign,
                                      [&](int64_t) { return 4.0 * uniform(rng); }, &aux_in),
                     c.misalign);
    options.gelu_input = &daux;
  } else if (c.gelu_input) {
    daux = on_device(ctx, host_tensor(c_shape, c.dtype, 0, [&](int64_t) { return nan; }, nullptr), 0);
    options.gelu_input = &daux;
  }
  const absl::Status status = gemm(ctx, da, db, dc, options);
  ASSERT_TRUE(status.ok()) << status;
  const Tensor got = to_host(ctx, dc);
  const Tensor got_aux = c.gelu_input && !reads_aux ? to_host(ctx, daux) : Tensor();
  if (c.addend) {  // read, never written
    const Tensor after = to_host(ctx, daddend);
    for (int64_t i = 0; i < after.numel(); ++i) ASSERT_EQ(get(after, i), c0[i]) << "addend " << i;
  }

  const double tol = tolerance(c, !ctx.device().is_cpu());
  if (outcome != nullptr) {
    outcome->got = got;
    outcome->scale.assign(got.numel(), 0.0);
  }
  double worst = 0, worst_aux = 0;
  for (int64_t p = 0; p < batches; ++p) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t q = 0; q < c.k; ++q) {
          const double x = a[p * c.m * c.k + (c.trans_a ? q * c.m + i : i * c.k + q)];
          const double y = b[p * c.k * c.n + (c.trans_b ? j * c.k + q : q * c.n + j)];
          sum += x * y;
          magnitude += std::fabs(x * y);
        }
        const int64_t idx = p * c.m * c.n + i * c.n + j;
        double v = c.alpha * sum, scale = std::fabs(c.alpha) * magnitude;
        if (c.beta != 0.0) {
          v += c.beta * c0[idx];
          scale += std::fabs(c.beta * c0[idx]);
        }
        if (has_bias) {
          v += bias[j];
          scale += std::fabs(bias[j]);
        }
        scale = std::max(scale, 1e-30);
        if (outcome != nullptr) outcome->scale[idx] = scale;
        if (reads_aux) v *= gelu_grad(aux_in[idx]);
        if (c.gelu_input && !reads_aux) {
          const double e = std::fabs(get(got_aux, idx) - v) / scale;
          ASSERT_FALSE(std::isnan(e)) << "gelu_input (" << p << ", " << i << ", " << j << ")";
          worst_aux = std::max(worst_aux, e);
        }
        if (c.epilogue == Epilogue::kBiasGelu) v = gelu(v);
        const double e = std::fabs(get(got, idx) - v) / scale;
        ASSERT_FALSE(std::isnan(e)) << "c (" << p << ", " << i << ", " << j << ") = "
                                    << get(got, idx) << ", want " << v;
        worst = std::max(worst, e);
      }
    }
  }
  EXPECT_LE(worst, tol);
  EXPECT_LE(worst_aux, tol);
  worst_errors.note(c, std::max(worst, worst_aux));
}

std::unique_ptr<Context> cpu_context() {
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cpu());
  COLOSSAL_CHECK_OK(ctx.status());
  return *std::move(ctx);
}

#if COLOSSAL_WITH_CUDA
std::unique_ptr<Context> cuda_context() {
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cuda(0));
  COLOSSAL_CHECK_OK(ctx.status());
  return *std::move(ctx);
}
#endif

struct DtypeMode {
  DType dtype;
  bool tf32;
};
constexpr DtypeMode kModes[] = {{DType::kF32, false}, {DType::kF32, true}, {DType::kBF16, false},
                                {DType::kF16, false}, {DType::kF64, false}};
constexpr int64_t kShapes[][3] = {{1, 1, 1}, {3, 5, 7}, {65, 33, 127}, {257, 129, 511}};

void every_dtype_transpose_and_shape(Context& ctx) {
  uint32_t seed = 1;
  for (const DtypeMode& mode : kModes) {
    for (int t = 0; t < 4; ++t) {
      for (const auto& s : kShapes) {
        Case c;
        c.dtype = mode.dtype;
        c.tf32 = mode.tf32;
        c.m = s[0];
        c.n = s[1];
        c.k = s[2];
        c.trans_a = t & 1;
        c.trans_b = t & 2;
        check(ctx, c, seed++);
      }
    }
  }
  worst_errors.print_and_reset(ctx.device().to_string());
}

void batched_and_epilogues(Context& ctx) {
  uint32_t seed = 1000;
  for (const DtypeMode& mode : kModes) {
    for (int t = 0; t < 4; ++t) {
      Case c;
      c.dtype = mode.dtype;
      c.tf32 = mode.tf32;
      c.trans_a = t & 1;
      c.trans_b = t & 2;
      // Strided batch, odd sizes.
      c.batch = 3;
      c.m = 33;
      c.n = 65;
      c.k = 17;
      check(ctx, c, seed++);
      // alpha, beta != (1, 0); C is read.
      c.alpha = 0.5;
      c.beta = -1.5;
      check(ctx, c, seed++);
      // The same read from a separate addend, C only written.
      c.addend = true;
      check(ctx, c, seed++);
      c.addend = false;
      // Epilogues, 2-D and batched, odd n for bias; n % 8 == 0 for gelu_input.
      c.batch = 0;
      c.alpha = 1.0;
      c.beta = 0.0;
      c.epilogue = Epilogue::kBias;
      check(ctx, c, seed++);
      c.epilogue = Epilogue::kBiasGelu;
      check(ctx, c, seed++);
      c.m = 40;
      c.n = 72;
      c.k = 96;
      c.gelu_input = true;
      check(ctx, c, seed++);
      c.batch = 2;
      c.alpha = -0.75;
      c.beta = 0.25;
      check(ctx, c, seed++);
      c.gelu_input = false;
      c.epilogue = Epilogue::kBias;
      check(ctx, c, seed++);
      // A residual added as the bias GEMM writes (Linear's forward_add).
      c.batch = 0;
      c.alpha = 1.0;
      c.beta = 1.0;
      c.addend = true;
      check(ctx, c, seed++);
      c.addend = false;
      c.batch = 2;
      c.alpha = -0.75;
      // GELU's backward reading the pre-GELU value, 2-D and batched.
      c.epilogue = Epilogue::kDGelu;
      c.gelu_input = true;
      c.beta = 0.0;
      check(ctx, c, seed++);
      c.batch = 0;
      c.alpha = 1.0;
      check(ctx, c, seed++);
    }
  }
  worst_errors.print_and_reset(ctx.device().to_string());
}

void edge_cases(Context& ctx) {
  uint32_t seed = 5000;
  for (const DtypeMode& mode : kModes) {
    Case c;
    c.dtype = mode.dtype;
    c.tf32 = mode.tf32;
    // Pointers one element past an aligned start (2 bytes for half types).
    c.m = 65;
    c.n = 33;
    c.k = 127;
    c.misalign = 1;
    c.trans_b = true;
    check(ctx, c, seed++);
    c.epilogue = Epilogue::kBias;
    c.beta = 1.0;
    check(ctx, c, seed++);
    // k = 0: C = beta C (+ bias).
    c.misalign = 0;
    c.m = 5;
    c.n = 8;
    c.k = 0;
    c.beta = 2.0;
    check(ctx, c, seed++);
  }
  worst_errors.print_and_reset(ctx.device().to_string());
}

TEST(GemmCpuTest, EveryDtypeTransposeAndShape) {
  auto ctx = cpu_context();
  every_dtype_transpose_and_shape(*ctx);
}

TEST(GemmCpuTest, BatchedEpiloguesAlphaBeta) {
  auto ctx = cpu_context();
  batched_and_epilogues(*ctx);
}

TEST(GemmCpuTest, MisalignedAndEmpty) {
  auto ctx = cpu_context();
  edge_cases(*ctx);
}

TEST(GemmCudaTest, EveryDtypeTransposeAndShape) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto ctx = cuda_context();
  every_dtype_transpose_and_shape(*ctx);
#endif
}

TEST(GemmCudaTest, BatchedEpiloguesAlphaBeta) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto ctx = cuda_context();
  batched_and_epilogues(*ctx);
#endif
}

TEST(GemmCudaTest, MisalignedAndEmpty) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto ctx = cuda_context();
  edge_cases(*ctx);
#endif
}

TEST(GemmCudaTest, AlgorithmsAreCachedPerProblem) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto ctx = cuda_context();
  MatmulAlgoCache& cache = ctx->matmul_algo_cache();
  Case c;
  c.dtype = DType::kBF16;
  c.m = 64;
  c.n = 128;
  c.k = 256;
  check(*ctx, c, 1);
  EXPECT_EQ(cache.size(), 1u);
  check(*ctx, c, 2);  // same problem: a cache hit
  EXPECT_EQ(cache.size(), 1u);
  c.trans_b = true;
  check(*ctx, c, 3);
  EXPECT_EQ(cache.size(), 2u);
  c.misalign = 1;  // other pointer alignment: another algorithm
  check(*ctx, c, 4);
  EXPECT_EQ(cache.size(), 3u);
  c.misalign = 0;
  c.epilogue = Epilogue::kBias;
  check(*ctx, c, 5);
  EXPECT_EQ(cache.size(), 4u);
#endif
}

TEST(GemmCpuTest, AlgorithmActionPerCacheEntryAutotuneAndCapture) {
  using internal::AlgoAction;
  using internal::choose_algo_action;
  const std::optional<MatmulAlgo> none;
  auto entry = [](MatmulAlgoSource source) {
    MatmulAlgo a;
    a.source = source;
    return std::optional<MatmulAlgo>(a);
  };
  for (GemmAutotune on : {GemmAutotune::kOn, GemmAutotune::kLog}) {
    EXPECT_EQ(choose_algo_action(none, on, false), AlgoAction::kAutotune);
    EXPECT_EQ(choose_algo_action(none, on, true), AlgoAction::kProvisional);
    EXPECT_EQ(choose_algo_action(entry(MatmulAlgoSource::kProvisional), on, false),
              AlgoAction::kAutotune);
    EXPECT_EQ(choose_algo_action(entry(MatmulAlgoSource::kProvisional), on, true),
              AlgoAction::kUseCached);
    for (bool capturing : {false, true}) {
      EXPECT_EQ(choose_algo_action(entry(MatmulAlgoSource::kAutotuned), on, capturing),
                AlgoAction::kUseCached);
      EXPECT_EQ(choose_algo_action(entry(MatmulAlgoSource::kHeuristic), on, capturing),
                AlgoAction::kUseCached);
    }
  }
  for (bool capturing : {false, true}) {
    EXPECT_EQ(choose_algo_action(none, GemmAutotune::kOff, capturing), AlgoAction::kHeuristic);
    for (MatmulAlgoSource source : {MatmulAlgoSource::kHeuristic, MatmulAlgoSource::kAutotuned,
                                    MatmulAlgoSource::kProvisional}) {
      EXPECT_EQ(choose_algo_action(entry(source), GemmAutotune::kOff, capturing),
                AlgoAction::kUseCached);
    }
  }
}

TEST(GemmCpuTest, FastestCandidate) {
  using internal::fastest_candidate;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fastest_candidate(nullptr, 0), -1);
  const float a[] = {1.0f, 0.5f, 0.75f};
  EXPECT_EQ(fastest_candidate(a, 3), 1);
  const float ties[] = {2.0f, 1.0f, 1.0f};
  EXPECT_EQ(fastest_candidate(ties, 3), 1);  // the heuristic's order breaks ties
  const float failed[] = {-1.0f, nan, 3.0f, inf, 2.5f};
  EXPECT_EQ(fastest_candidate(failed, 5), 4);
  const float all_failed[] = {-1.0f, nan};
  EXPECT_EQ(fastest_candidate(all_failed, 2), -1);
}

// cuBLAS is a candidate only for plain GEMMs (no epilogue), of every dtype.
TEST(GemmCpuTest, CublasCanRunPlainProblemsOnly) {
  using internal::cublas_can_run;
  internal::GemmProblem p;
  p.m = p.n = p.k = 64;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    p.dtype = t;
    EXPECT_TRUE(cublas_can_run(p)) << dtype_name(t);
    p.allow_tf32 = true;
    EXPECT_TRUE(cublas_can_run(p)) << dtype_name(t);
    p.batch = 3;
    p.beta = 1.0;
    p.trans_a = true;
    EXPECT_TRUE(cublas_can_run(p)) << dtype_name(t);
    p.batch = 1;
    p.beta = 0.0;
    p.trans_a = false;
    p.allow_tf32 = false;
  }
  p.dtype = DType::kI32;
  EXPECT_FALSE(cublas_can_run(p));
  p.dtype = DType::kBF16;
  int bias = 0, aux = 0;
  p.epilogue = Epilogue::kBias;
  p.bias = &bias;
  EXPECT_FALSE(cublas_can_run(p));
  p.epilogue = Epilogue::kBiasGelu;
  EXPECT_FALSE(cublas_can_run(p));
  p.gelu_input = &aux;
  EXPECT_FALSE(cublas_can_run(p));
}

TEST(GemmCpuTest, ScopedCudaLibraryForTestingRestores) {
  using internal::CudaLibraryChoice;
  EXPECT_EQ(internal::cuda_library_for_testing(), CudaLibraryChoice::kAuto);
  {
    internal::ScopedCudaLibraryForTesting cublas(CudaLibraryChoice::kCublas);
    EXPECT_EQ(internal::cuda_library_for_testing(), CudaLibraryChoice::kCublas);
    {
      internal::ScopedCudaLibraryForTesting lt(CudaLibraryChoice::kCublasLt);
      EXPECT_EQ(internal::cuda_library_for_testing(), CudaLibraryChoice::kCublasLt);
    }
    EXPECT_EQ(internal::cuda_library_for_testing(), CudaLibraryChoice::kCublas);
  }
  EXPECT_EQ(internal::cuda_library_for_testing(), CudaLibraryChoice::kAuto);
}

#if COLOSSAL_WITH_CUDA
// cuBLAS gets the problem mapped onto column-major exactly as cuBLASLt does
// (its A is our B, its m our n), so its arguments agree with the cache key.
TEST(GemmCpuTest, CublasArgumentsFollowTheCublasLtMapping) {
  auto at = [](uintptr_t address) { return reinterpret_cast<void*>(address); };
  internal::GemmProblem p;
  p.m = 8192;
  p.n = 768;
  p.k = 3072;
  p.dtype = DType::kBF16;
  p.trans_b = true;  // y = x W^T with W [768, 3072]
  p.a = at(0x10000);
  p.b = at(0x20040);
  p.c = at(0x30000);
  internal::CublasArgs args = internal::cublas_args(p);
  EXPECT_EQ(args.op_a, CUBLAS_OP_T);
  EXPECT_EQ(args.op_b, CUBLAS_OP_N);
  EXPECT_EQ(args.m, 768);
  EXPECT_EQ(args.n, 8192);
  EXPECT_EQ(args.k, 3072);
  EXPECT_EQ(args.batch, 1);
  EXPECT_EQ(args.lda, 3072);
  EXPECT_EQ(args.ldb, 3072);
  EXPECT_EQ(args.ldc, 768);
  EXPECT_EQ(args.stride_a, 0);
  EXPECT_EQ(args.stride_b, 0);
  EXPECT_EQ(args.stride_c, 0);
  EXPECT_EQ(args.data_type, CUDA_R_16BF);
  EXPECT_EQ(args.compute_type, CUBLAS_COMPUTE_32F);
  EXPECT_EQ(args.scale_type, CUDA_R_32F);

  // Every dtype, transpose and batch: the same numbers as cuBLASLt's key.
  const std::pair<DType, bool> modes[] = {{DType::kF32, false}, {DType::kF32, true},
                                          {DType::kF16, false}, {DType::kBF16, false},
                                          {DType::kF64, false}};
  for (const auto& [dtype, tf32] : modes) {
    for (int t = 0; t < 4; ++t) {
      for (int64_t batch : {1, 3}) {
        internal::GemmProblem q = p;
        q.m = 65;
        q.n = 33;
        q.k = 127;
        q.dtype = dtype;
        q.allow_tf32 = tf32;
        q.trans_a = t & 1;
        q.trans_b = t & 2;
        q.batch = batch;
        SCOPED_TRACE(absl::StrCat(dtype_name(dtype), tf32 ? "(tf32)" : "", " t=", t, " batch=", batch));
        const MatmulAlgoKey key = internal::matmul_algo_key(q);
        args = internal::cublas_args(q);
        EXPECT_EQ(args.op_a, key.op_a);
        EXPECT_EQ(args.op_b, key.op_b);
        EXPECT_EQ(args.m, key.m);
        EXPECT_EQ(args.n, key.n);
        EXPECT_EQ(args.k, key.k);
        EXPECT_EQ(args.batch, key.batch);
        EXPECT_EQ(args.lda, key.lda);
        EXPECT_EQ(args.ldb, key.ldb);
        EXPECT_EQ(args.ldc, key.ldc);
        EXPECT_EQ(args.stride_a, key.stride_a);
        EXPECT_EQ(args.stride_b, key.stride_b);
        EXPECT_EQ(args.stride_c, key.stride_c);
        EXPECT_EQ(args.data_type, key.a_type);
        EXPECT_EQ(args.compute_type, key.compute_type);
        EXPECT_EQ(args.scale_type, key.scale_type);
        EXPECT_EQ(args.lda, (q.trans_b ? q.k : q.n));  // our B's row length
        EXPECT_EQ(args.ldb, (q.trans_a ? q.m : q.k));  // our A's row length
      }
    }
  }
  p.dtype = DType::kF32;
  p.allow_tf32 = true;
  EXPECT_EQ(internal::cublas_args(p).compute_type, CUBLAS_COMPUTE_32F_FAST_TF32);
  p.dtype = DType::kF64;
  EXPECT_EQ(internal::cublas_args(p).compute_type, CUBLAS_COMPUTE_64F);
  EXPECT_EQ(internal::cublas_args(p).scale_type, CUDA_R_64F);
  p.dtype = DType::kF16;
  EXPECT_EQ(internal::cublas_args(p).data_type, CUDA_R_16F);
  EXPECT_EQ(internal::cublas_args(p).compute_type, CUBLAS_COMPUTE_32F);

  // k == 0 with B transposed: our B is [n, 0], a leading dimension of 0 for
  // cuBLASLt; cuBLAS wants at least 1 (nothing is read either way).
  p.k = 0;
  p.batch = 2;
  args = internal::cublas_args(p);
  EXPECT_EQ(args.lda, 1);
  EXPECT_EQ(args.ldb, 1);  // our A [m, 0]
  EXPECT_EQ(args.ldc, 768);
  EXPECT_EQ(args.stride_a, 0);
  EXPECT_EQ(args.stride_c, 8192 * 768);
}

// The cache key is plain host arithmetic over the problem and the pointers'
// addresses, so it is checked without a GPU.
TEST(GemmCpuTest, CudaAlgorithmCacheKey) {
  auto at = [](uintptr_t address) { return reinterpret_cast<void*>(address); };
  internal::GemmProblem p;
  p.m = 8192;
  p.n = 768;
  p.k = 3072;
  p.dtype = DType::kBF16;
  p.trans_b = true;  // y = x W^T with W [768, 3072]
  p.a = at(0x10000);
  p.b = at(0x20040);  // 64-byte aligned
  p.c = at(0x30002);  // 2-byte aligned
  MatmulAlgoKey key = internal::matmul_algo_key(p);
  // cuBLASLt computes C^T = op(B)^T op(A)^T: its m is our n, its A our B.
  EXPECT_EQ(key.m, 768);
  EXPECT_EQ(key.n, 8192);
  EXPECT_EQ(key.k, 3072);
  EXPECT_EQ(key.batch, 1);
  EXPECT_EQ(key.lda, 3072);  // our B stored [768, 3072]: column-major 3072 x 768
  EXPECT_EQ(key.ldb, 3072);  // our A stored [8192, 3072]
  EXPECT_EQ(key.ldc, 768);
  EXPECT_EQ(key.stride_a, 0);
  EXPECT_EQ(key.op_a, CUBLAS_OP_T);
  EXPECT_EQ(key.op_b, CUBLAS_OP_N);
  EXPECT_EQ(key.a_type, CUDA_R_16BF);
  EXPECT_EQ(key.c_type, CUDA_R_16BF);
  EXPECT_EQ(key.compute_type, CUBLAS_COMPUTE_32F);
  EXPECT_EQ(key.scale_type, CUDA_R_32F);
  EXPECT_EQ(key.epilogue, CUBLASLT_EPILOGUE_DEFAULT);
  EXPECT_EQ(key.align_a, 64);
  EXPECT_EQ(key.align_b, 256);
  EXPECT_EQ(key.align_c, 2);
  EXPECT_EQ(key.align_bias, 0);
  EXPECT_EQ(key.align_aux, 0);
  EXPECT_EQ(key.aux_ld, 0);

  // alpha and beta are not part of the key: one algorithm serves both.
  internal::GemmProblem q = p;
  q.alpha = 0.5;
  q.beta = 1.0;
  EXPECT_TRUE(internal::matmul_algo_key(q) == key);
  // A separate addend is (cuBLAS cannot run it; its alignment matters).
  q.addend = at(0x60020);
  EXPECT_EQ(internal::matmul_algo_key(q).align_addend, 32);
  EXPECT_FALSE(internal::matmul_algo_key(q) == key);
  EXPECT_FALSE(internal::cublas_can_run(q));

  // Batched, transposed A, float32 with TF32, bias + GELU writing gelu_input.
  q = p;
  q.batch = 3;
  q.trans_a = true;
  q.trans_b = false;
  q.dtype = DType::kF32;
  q.allow_tf32 = true;
  q.epilogue = Epilogue::kBiasGelu;
  q.bias = at(0x40010);
  q.gelu_input = at(0x50100);
  key = internal::matmul_algo_key(q);
  EXPECT_EQ(key.batch, 3);
  EXPECT_EQ(key.lda, 768);   // our B stored [3072, 768]
  EXPECT_EQ(key.ldb, 8192);  // our A stored [3072, 8192]
  EXPECT_EQ(key.stride_a, 3072 * 768);
  EXPECT_EQ(key.stride_b, 8192 * 3072);
  EXPECT_EQ(key.stride_c, 8192 * 768);
  EXPECT_EQ(key.op_a, CUBLAS_OP_N);
  EXPECT_EQ(key.op_b, CUBLAS_OP_T);
  EXPECT_EQ(key.a_type, CUDA_R_32F);
  EXPECT_EQ(key.compute_type, CUBLAS_COMPUTE_32F_FAST_TF32);
  EXPECT_EQ(key.epilogue, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  EXPECT_EQ(key.align_bias, 16);
  EXPECT_EQ(key.align_aux, 256);
  EXPECT_EQ(key.aux_ld, 768);
  q.gelu_input = nullptr;
  EXPECT_EQ(internal::matmul_algo_key(q).epilogue, CUBLASLT_EPILOGUE_GELU_BIAS);
  q.allow_tf32 = false;
  EXPECT_EQ(internal::matmul_algo_key(q).compute_type, CUBLAS_COMPUTE_32F);
}
#endif

// Autotuning may pick another algorithm than the heuristic's first; the result
// must agree with the heuristic's (and the reference) within the tolerance.
// Covers beta != 0 (the candidates must not accumulate into C), gelu_input,
// batches, misaligned pointers and shapes big enough for several candidates.
TEST(GemmCudaTest, AutotuneMatchesHeuristicChoice) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  ContextOptions tuned_options, plain_options;
  tuned_options.gemm_autotune = GemmAutotune::kOn;
  plain_options.gemm_autotune = GemmAutotune::kOff;
  absl::StatusOr<std::unique_ptr<Context>> tuned = Context::create(Device::cuda(0), tuned_options);
  absl::StatusOr<std::unique_ptr<Context>> plain = Context::create(Device::cuda(0), plain_options);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::vector<Case> cases;
  auto add = [&](DType dtype, bool tf32, int64_t m, int64_t n, int64_t k) {
    Case c;
    c.dtype = dtype;
    c.tf32 = tf32;
    c.m = m;
    c.n = n;
    c.k = k;
    c.trans_b = true;
    cases.push_back(c);
    return &cases.back();
  };
  add(DType::kBF16, false, 512, 768, 1024);
  add(DType::kBF16, false, 256, 384, 2048)->beta = 1.0;  // accumulate: C is read
  Case* c = add(DType::kBF16, false, 256, 512, 768);
  c->alpha = 0.5;
  c->beta = -1.5;
  c->epilogue = Epilogue::kBias;
  c = add(DType::kBF16, false, 256, 512, 256);
  c->epilogue = Epilogue::kBiasGelu;
  c->gelu_input = true;
  add(DType::kF16, false, 384, 256, 512)->batch = 3;
  add(DType::kF32, false, 256, 256, 256);
  add(DType::kF32, true, 256, 256, 512)->beta = 0.25;
  add(DType::kF64, false, 64, 96, 128);
  add(DType::kBF16, false, 65, 33, 127)->misalign = 1;
  // A separate addend: the candidates write C directly (C is not read).
  c = add(DType::kBF16, false, 512, 768, 3072);
  c->beta = 1.0;
  c->epilogue = Epilogue::kBias;
  c->addend = true;
  // No epilogue, separate addend: cuBLAS (in place only) must not be chosen.
  c = add(DType::kBF16, false, 512, 1024, 1024);
  c->trans_b = false;
  c->beta = 1.0;
  c->addend = true;
  // Plain bf16 NN GEMMs, 2-D and batched (the case, smaller): cuBLAS is
  // a candidate, so the cached entry may name either library.
  add(DType::kBF16, false, 512, 1024, 1024)->trans_b = false;
  c = add(DType::kBF16, false, 256, 512, 384);
  c->trans_b = false;
  c->batch = 4;
  uint32_t seed = 9000;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.label());
    Outcome t, u;
    const size_t before = (*tuned)->matmul_algo_cache().size();
    check(**tuned, k, seed, &t);
    ASSERT_FALSE(HasFatalFailure());
    check(**plain, k, seed, &u);
    ASSERT_FALSE(HasFatalFailure());
    ++seed;
    ASSERT_EQ(t.got.numel(), u.got.numel());
    ASSERT_EQ((*tuned)->matmul_algo_cache().size(), before + 1);
    const double tol = tolerance(k, true);
    double worst = 0;
    for (int64_t i = 0; i < t.got.numel(); ++i) {
      worst = std::max(worst, std::fabs(get(t.got, i) - get(u.got, i)) / t.scale[i]);
    }
    EXPECT_LE(worst, tol);
    std::printf("  autotuned vs heuristic %-40s normalised difference %.3g\n", k.label().c_str(),
                worst);
  }
  // How the algorithms were chosen: the tuned context timed candidates for at
  // least some problems (each large one has several); the plain one never did.
  // cuBLAS may win only problems without an epilogue, and only by timing.
  int autotuned = 0, cublas = 0;
  for (const auto& [key, algo] : (*tuned)->matmul_algo_cache().entries()) {
    EXPECT_NE(algo.source, MatmulAlgoSource::kProvisional);
    autotuned += algo.source == MatmulAlgoSource::kAutotuned;
    if (algo.library == MatmulAlgoLibrary::kCublas) {
      ++cublas;
      EXPECT_EQ(key.epilogue, CUBLASLT_EPILOGUE_DEFAULT);
      EXPECT_EQ(algo.source, MatmulAlgoSource::kAutotuned);
    }
  }
  std::printf("  %d of %zu problems autotuned, %d won by cuBLAS\n", autotuned, cases.size(),
              cublas);
  EXPECT_GE(autotuned, 1);
  ASSERT_EQ((*plain)->matmul_algo_cache().size(), cases.size());
  for (const auto& [key, algo] : (*plain)->matmul_algo_cache().entries()) {
    EXPECT_EQ(algo.source, MatmulAlgoSource::kHeuristic);
    EXPECT_EQ(algo.library, MatmulAlgoLibrary::kCublasLt);  // autotuning off: heuristic #1
  }
#endif
}

// varying_size (a mixture of experts' expert GEMMs, whose sizes change every
// call): even with autotuning on, the problem takes cuBLASLt's heuristic
// first choice, untimed, as autotuning off does: the same bits.
TEST(GemmCudaTest, VaryingSizeIsNeverAutotuned) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  ContextOptions tuned_options, plain_options;
  tuned_options.gemm_autotune = GemmAutotune::kOn;
  plain_options.gemm_autotune = GemmAutotune::kOff;
  absl::StatusOr<std::unique_ptr<Context>> tuned = Context::create(Device::cuda(0), tuned_options);
  absl::StatusOr<std::unique_ptr<Context>> plain = Context::create(Device::cuda(0), plain_options);
  ASSERT_TRUE(tuned.ok() && plain.ok());
  std::mt19937 rng(78);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  const int64_t m = 333, n = 1024, k = 768;
  const Tensor ha = host_tensor({m, k}, DType::kBF16, 0, [&](int64_t) { return uniform(rng); }, nullptr);
  const Tensor hb = host_tensor({n, k}, DType::kBF16, 0, [&](int64_t) { return uniform(rng); }, nullptr);
  GemmOptions options;
  options.trans_b = true;
  options.varying_size = true;
  Tensor outs[2];
  for (int i = 0; i < 2; ++i) {
    Context& ctx = i == 0 ? **tuned : **plain;
    absl::StatusOr<Tensor> c = matmul(ctx, on_device(ctx, ha, 0), on_device(ctx, hb, 0), options);
    ASSERT_TRUE(c.ok()) << c.status();
    outs[i] = to_host(ctx, *c);
  }
  ASSERT_EQ((*tuned)->matmul_algo_cache().size(), 1u);
  for (const auto& [key, algo] : (*tuned)->matmul_algo_cache().entries()) {
    EXPECT_EQ(algo.source, MatmulAlgoSource::kHeuristic);
    EXPECT_EQ(algo.library, MatmulAlgoLibrary::kCublasLt);
  }
  EXPECT_EQ(std::memcmp(outs[0].raw_data(), outs[1].raw_data(), outs[0].nbytes()), 0);
#endif
}

// Problems of >= 1e11 flops also time tile / cluster / custom-option variants
// of the heuristic's first algorithm (gemm_cuda.cc). Whichever wins, sampled
// outputs match a float64 dot product within bf16's tolerance (the full
// float64 reference is too slow at this size), and the entry is autotuned.
TEST(GemmCudaTest, LargeProblemVariantsMatchSampledReference) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  ContextOptions options;
  options.gemm_autotune = GemmAutotune::kOn;
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cuda(0), options);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const int64_t m = 4096, n = 4096, k = 3072;  // 2mnk = 1.03e11
  std::mt19937 rng(77);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> a, b;
  const Tensor ha = host_tensor({m, k}, DType::kBF16, 0, [&](int64_t) { return uniform(rng); }, &a);
  const Tensor hb = host_tensor({k, n}, DType::kBF16, 0, [&](int64_t) { return uniform(rng); }, &b);
  const Tensor hc = host_tensor({m, n}, DType::kBF16, 0,
                                [](int64_t) { return std::numeric_limits<double>::quiet_NaN(); },
                                nullptr);
  Tensor da = on_device(**ctx, ha, 0), db = on_device(**ctx, hb, 0), dc = on_device(**ctx, hc, 0);
  const absl::Status status = gemm(**ctx, da, db, dc, GemmOptions{});
  ASSERT_TRUE(status.ok()) << status;
  const Tensor got = to_host(**ctx, dc);
  Case c;
  c.dtype = DType::kBF16;
  const double tol = tolerance(c, true);
  double worst = 0;
  for (int s = 0; s < 512; ++s) {
    const int64_t i = (s * 2654435761u) % m, j = (s * 40503u + 17) % n;
    double sum = 0, magnitude = 0;
    for (int64_t q = 0; q < k; ++q) {
      sum += a[i * k + q] * b[q * n + j];
      magnitude += std::fabs(a[i * k + q] * b[q * n + j]);
    }
    worst = std::max(worst, std::fabs(get(got, i * n + j) - sum) / magnitude);
  }
  EXPECT_LE(worst, tol);
  ASSERT_EQ((*ctx)->matmul_algo_cache().size(), 1u);
  for (const auto& [key, algo] : (*ctx)->matmul_algo_cache().entries()) {
    EXPECT_EQ(algo.source, MatmulAlgoSource::kAutotuned);
  }
  std::printf("  bf16 4096x4096x3072: sampled normalised error %.3g (tolerance %.3g)\n", worst, tol);
#endif
}

// Both dispatch paths against the float64 reference: every case of the tests
// above (each dtype incl. TF32, NN/NT/TN/TT, batched, alpha/beta, misaligned,
// k = 0) with cuBLAS forced for every problem without an epilogue or a
// separate addend, and with
// cuBLASLt only. Every entry must name the forced library (epilogues stay on
// cuBLASLt), and a cache hit dispatches to the cached library.
#if COLOSSAL_WITH_CUDA
void check_forced_library(internal::CudaLibraryChoice choice, GemmAutotune autotune) {
  internal::ScopedCudaLibraryForTesting force(choice);
  ContextOptions options;
  options.gemm_autotune = autotune;
  absl::StatusOr<std::unique_ptr<Context>> created = Context::create(Device::cuda(0), options);
  ASSERT_TRUE(created.ok()) << created.status();
  Context& ctx = **created;
  every_dtype_transpose_and_shape(ctx);
  batched_and_epilogues(ctx);
  edge_cases(ctx);
  const size_t entries = ctx.matmul_algo_cache().size();
  Case c;  // again: a cache hit
  c.dtype = DType::kBF16;
  c.m = 257;
  c.n = 129;
  c.k = 511;
  check(ctx, c, 123);
  check(ctx, c, 124);
  EXPECT_EQ(ctx.matmul_algo_cache().size(), entries);
  int cublas = 0;
  for (const auto& [key, algo] : ctx.matmul_algo_cache().entries()) {
    // cuBLAS computes in place: a separate addend stays on cuBLASLt too.
    const bool plain = key.epilogue == CUBLASLT_EPILOGUE_DEFAULT && key.align_addend == 0;
    if (choice == internal::CudaLibraryChoice::kCublas && plain) {
      EXPECT_EQ(algo.library, MatmulAlgoLibrary::kCublas);
      EXPECT_EQ(algo.source, MatmulAlgoSource::kHeuristic);
    } else {
      EXPECT_EQ(algo.library, MatmulAlgoLibrary::kCublasLt);
    }
    cublas += algo.library == MatmulAlgoLibrary::kCublas;
  }
  std::printf("  %d of %zu cached problems on cuBLAS\n", cublas, ctx.matmul_algo_cache().size());
  if (choice == internal::CudaLibraryChoice::kCublas) {
    EXPECT_GE(cublas, 1);
  }
}
#endif  // COLOSSAL_WITH_CUDA

TEST(GemmCudaTest, ForcedCublasMatchesReference) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  check_forced_library(internal::CudaLibraryChoice::kCublas, GemmAutotune::kOn);
  check_forced_library(internal::CudaLibraryChoice::kCublas, GemmAutotune::kOff);
#endif
}

TEST(GemmCudaTest, ForcedCublasLtMatchesReference) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  check_forced_library(internal::CudaLibraryChoice::kCublasLt, GemmAutotune::kOn);
#endif
}

// A problem whose cached entry is cuBLAS may be captured into a CUDA graph:
// cuBLAS runs on the compute stream with the context's workspace, so the graph
// allocates nothing, and a replay matches the reference as the eager call does.
TEST(GemmCudaTest, CublasEntryCapturesIntoAGraph) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  internal::ScopedCudaLibraryForTesting force(internal::CudaLibraryChoice::kCublas);
  absl::StatusOr<std::unique_ptr<Context>> created = Context::create(Device::cuda(0));
  ASSERT_TRUE(created.ok()) << created.status();
  Context& ctx = **created;
  const int64_t batch = 2, m = 256, n = 384, k = 512;
  std::mt19937 rng(78);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto random = [&](int64_t) { return uniform(rng); };
  std::vector<double> a, b;
  const Tensor da = on_device(ctx, host_tensor({batch, m, k}, DType::kBF16, 0, random, &a), 0);
  const Tensor db = on_device(ctx, host_tensor({batch, k, n}, DType::kBF16, 0, random, &b), 0);
  absl::StatusOr<Tensor> dc = Tensor::empty({batch, m, n}, DType::kBF16, ctx.compute_stream());
  ASSERT_TRUE(dc.ok()) << dc.status();
  ASSERT_TRUE(gemm(ctx, da, db, *dc).ok());  // caches cuBLAS
  const Tensor eager = to_host(ctx, *dc);
  ASSERT_EQ(ctx.matmul_algo_cache().size(), 1u);
  EXPECT_EQ(ctx.matmul_algo_cache().entries()[0].second.library, MatmulAlgoLibrary::kCublas);
  ASSERT_EQ(cudaMemsetAsync(dc->raw_data(), 0, dc->nbytes(), ctx.compute_stream().handle()),
            cudaSuccess);

  cudaStream_t stream = ctx.compute_stream().handle();
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const absl::Status captured = gemm(ctx, da, db, *dc);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  const Tensor from_graph = to_host(ctx, *dc);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(ctx.matmul_algo_cache().size(), 1u);

  Case c;
  c.dtype = DType::kBF16;
  const double tol = tolerance(c, true);
  double worst = 0;
  for (int64_t p = 0; p < batch; ++p) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, scale = 0;
        for (int64_t q = 0; q < k; ++q) {
          const double x = a[(p * m + i) * k + q], y = b[(p * k + q) * n + j];
          sum += x * y;
          scale += std::fabs(x * y);
        }
        const int64_t idx = (p * m + i) * n + j;
        worst = std::max({worst, std::fabs(get(eager, idx) - sum) / scale,
                          std::fabs(get(from_graph, idx) - sum) / scale});
      }
    }
  }
  EXPECT_LE(worst, tol);
#endif
}

// While the compute stream is being captured into a CUDA graph nothing is
// timed: the heuristic's first choice is captured and cached as provisional,
// and the next call outside a capture autotunes and replaces it. The graph and
// the eager call both give the right result.
TEST(GemmCudaTest, GraphCaptureTakesTheHeuristicChoiceProvisionally) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  ContextOptions options;
  options.gemm_autotune = GemmAutotune::kOn;
  absl::StatusOr<std::unique_ptr<Context>> created = Context::create(Device::cuda(0), options);
  ASSERT_TRUE(created.ok()) << created.status();
  Context& ctx = **created;
  MatmulAlgoCache& cache = ctx.matmul_algo_cache();
  const int64_t m = 256, n = 512, k = 512;
  std::mt19937 rng(77);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto random = [&](int64_t) { return uniform(rng); };
  std::vector<double> a, b;
  const Tensor da = on_device(ctx, host_tensor({m, k}, DType::kBF16, 0, random, &a), 0);
  const Tensor db = on_device(ctx, host_tensor({n, k}, DType::kBF16, 0, random, &b), 0);
  absl::StatusOr<Tensor> dc = Tensor::empty({m, n}, DType::kBF16, ctx.compute_stream());
  ASSERT_TRUE(dc.ok()) << dc.status();
  ctx.synchronize();
  const GemmOptions linear{.trans_b = true};  // y = x W^T

  internal::GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.dtype = DType::kBF16;
  p.trans_b = true;
  p.a = da.raw_data();
  p.b = db.raw_data();
  p.c = dc->raw_data();
  const MatmulAlgoKey key = internal::matmul_algo_key(p);

  cudaStream_t stream = ctx.compute_stream().handle();
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const absl::Status captured = gemm(ctx, da, db, *dc, linear);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured;
  ASSERT_TRUE(cache.find(key).has_value());
  EXPECT_EQ(cache.find(key)->source, MatmulAlgoSource::kProvisional);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  const Tensor from_graph = to_host(ctx, *dc);

  ASSERT_TRUE(gemm(ctx, da, db, *dc, linear).ok());  // outside a capture: autotunes
  const Tensor eager = to_host(ctx, *dc);
  ASSERT_TRUE(cache.find(key).has_value());
  EXPECT_NE(cache.find(key)->source, MatmulAlgoSource::kProvisional);
  EXPECT_EQ(cache.size(), 1u);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);  // still valid after the retuning
  const Tensor from_graph_again = to_host(ctx, *dc);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);

  Case c;
  c.dtype = DType::kBF16;
  const double tol = tolerance(c, true);
  double worst = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, scale = 0;
      for (int64_t q = 0; q < k; ++q) {
        sum += a[i * k + q] * b[j * k + q];
        scale += std::fabs(a[i * k + q] * b[j * k + q]);
      }
      const int64_t idx = i * n + j;
      worst = std::max({worst, std::fabs(get(from_graph, idx) - sum) / scale,
                        std::fabs(get(from_graph_again, idx) - sum) / scale,
                        std::fabs(get(eager, idx) - sum) / scale});
    }
  }
  EXPECT_LE(worst, tol);
#endif
}

// The usage example of gemm.h: a Linear layer with GELU, then a projection
// accumulated into y.
TEST(GemmCpuTest, HeaderExample) {
  auto ctx = cpu_context();
  Context& c = *ctx;
  auto ones = [&](const Shape& s, double v) {
    return host_tensor(s, DType::kF32, 0, [v](int64_t) { return v; }, nullptr);
  };
  const Tensor x = ones({4, 8}, 0.5), w_fc = ones({16, 8}, 0.25), b_fc = ones({16}, -0.5);
  const Tensor w_proj = ones({8, 16}, 0.125);
  Tensor y = ones({4, 8}, 1.0);
  absl::StatusOr<Tensor> h = matmul(c, x, w_fc, {.trans_b = true, .epilogue = Epilogue::kBiasGelu,
                                                 .bias = &b_fc});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->shape(), Shape({4, 16}));
  const double pre = 8 * 0.5 * 0.25 - 0.5;  // 0.5
  EXPECT_NEAR(h->data<float>()[0], gelu(pre), 1e-6);
  ASSERT_TRUE(gemm(c, *h, w_proj, y, {.trans_b = true, .beta = 1.0}).ok());
  EXPECT_NEAR(y.data<float>()[5], 1.0 + 16 * gelu(pre) * 0.125, 1e-5);
}

TEST(GemmCpuTest, ErrorsNameShapesAndDtypes) {
  auto ctx = cpu_context();
  Context& c = *ctx;
  auto make = [&](const Shape& s, DType t = DType::kF32) {
    absl::StatusOr<Tensor> x = Tensor::empty(s, t, Stream::cpu());
    COLOSSAL_CHECK_OK(x.status());
    return *x;
  };
  Tensor a = make({3, 5}), b = make({7, 4}), out = make({3, 4});
  absl::Status s = gemm(c, a, b, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "gemm(a: float32 [3, 5] on cpu, b: float32 [7, 4] on cpu, c: float32 [3, 4] on cpu): "
            "inner dimensions differ: op(a) is [3, 5], op(b) is [7, 4]");
  Tensor b2 = make({4, 5});
  s = gemm(c, a, b2, out, {.trans_b = true});
  EXPECT_TRUE(s.ok()) << s;
  Tensor wrong_c = make({4, 3});
  EXPECT_TRUE(contains(gemm(c, a, b2, wrong_c, {.trans_b = true}).message(),
                       "(transposed), c: float32 [4, 3] on cpu): c must be [3, 4] for op(a) [3, 5] "
                       "times op(b) [5, 4]"));
  Tensor a3 = make({2, 3, 5});
  EXPECT_TRUE(contains(gemm(c, a3, b2, out, {.trans_b = true}).message(),
                       "must all be 2-D or all 3-D (got ranks 3, 2, 2)"));
  Tensor b3 = make({3, 4, 5}), c3 = make({2, 3, 4});
  EXPECT_TRUE(contains(gemm(c, a3, b3, c3, {.trans_b = true}).message(), "batch sizes differ (2, 3, 2)"));
  Tensor ai = make({3, 5}, DType::kI32), bi = make({5, 4}, DType::kI32), ci = make({3, 4}, DType::kI32);
  EXPECT_TRUE(contains(gemm(c, ai, bi, ci).message(),
                       "dtype int32 is not supported (float32, float64, float16, bfloat16)"));
  Tensor bh = make({5, 4}, DType::kBF16);
  EXPECT_TRUE(contains(gemm(c, a, bh, out).message(), "b: bfloat16 [5, 4] on cpu, c: float32 [3, 4] "
                                                      "on cpu): dtypes differ"));
  Tensor bias = make({4}), bad_bias = make({3});
  Tensor b54 = make({5, 4});
  EXPECT_TRUE(contains(gemm(c, a, b54, out, {.bias = &bias}).message(),
                       "a bias needs the bias or bias_gelu epilogue"));
  EXPECT_TRUE(contains(gemm(c, a, b54, out, {.epilogue = Epilogue::kBias}).message(),
                       "the bias epilogue needs a bias"));
  EXPECT_TRUE(contains(gemm(c, a, b54, out, {.epilogue = Epilogue::kBias, .bias = &bad_bias}).message(),
                       "the bias must be float32 [4] on cpu, not float32 [3] on cpu"));
  Tensor aux = make({3, 4});
  EXPECT_TRUE(contains(gemm(c, a, b54, out, {.epilogue = Epilogue::kBias, .bias = &bias,
                                             .gelu_input = &aux})
                           .message(),
                       "gelu_input belongs to the bias_gelu and dgelu epilogues"));
  EXPECT_TRUE(contains(gemm(c, a, b54, out, {.epilogue = Epilogue::kDGelu}).message(),
                       "the dgelu epilogue reads gelu_input, which is missing"));
  EXPECT_TRUE(contains(gemm(c, a, b54, out, {.epilogue = Epilogue::kDGelu, .bias = &bias,
                                             .gelu_input = &aux})
                           .message(),
                       "a bias needs the bias or bias_gelu epilogue"));
  EXPECT_TRUE(contains(gemm(c, a, b54, out, {.beta = 1.0, .epilogue = Epilogue::kDGelu,
                                             .gelu_input = &aux})
                           .message(),
                       "the dgelu epilogue writes C, so beta must be 0 (got 1)"));
  EXPECT_TRUE(contains(gemm(c, a, b54, out, {.epilogue = Epilogue::kBiasGelu, .bias = &bias,
                                             .gelu_input = &aux})
                           .message(),
                       "gelu_input needs n (4) to be a multiple of 8"));
  Tensor square = make({4, 4});
  Tensor rows = *square.slice(0, 4);
  EXPECT_TRUE(contains(gemm(c, square, make({4, 4}), rows).message(), "c overlaps an input"));
  EXPECT_TRUE(contains(matmul(c, a, b54, {.beta = 1.0}).status().message(),
                       "matmul allocates its result, so beta must be 0"));
  Tensor undefined;
  EXPECT_TRUE(contains(gemm(c, a, b54, undefined).message(), "every operand must be defined"));
  Tensor addend = make({3, 4}), bad_addend = make({4, 3});
  EXPECT_TRUE(contains(gemm(c, a, b54, out, {.addend = &addend}).message(),
                       "an addend needs beta != 0"));
  EXPECT_TRUE(contains(gemm(c, a, b54, out, {.beta = 1.0, .addend = &bad_addend}).message(),
                       "the addend must be float32 [3, 4] like c, not float32 [4, 3] on cpu"));
  Tensor wide = make({3, 8});
  Tensor left = *(*wide.reshape({24})).slice(0, 12), right = *(*wide.reshape({24})).slice(2, 14);
  Tensor left2 = *left.reshape({3, 4}), right2 = *right.reshape({3, 4});
  EXPECT_TRUE(contains(gemm(c, a, b54, left2, {.beta = 1.0, .addend = &right2}).message(),
                       "the addend overlaps c without being c"));
  // The addend may be C itself: the plain in-place beta * C.
  EXPECT_TRUE(gemm(c, a, b54, left2, {.beta = 1.0, .addend = &left2}).ok());
  if (cuda_device_count() > 0) {
#if COLOSSAL_WITH_CUDA
    auto gpu = cuda_context();
    EXPECT_TRUE(contains(gemm(*gpu, a, b54, out).message(),
                         "operands must be on the context's device cuda:0"));
#endif
  }
}

}  // namespace
}  // namespace colossal::core::gemm
