// kernels/loss, vocabulary shards (vocab_shard_*): a random problem's logits
// split by columns into 1, 2 and 3 shards (uneven widths; the padding columns
// after v_real hold NaN; some shards hold only padding), each shard's max, sum
// of exponentials and gradient computed on its own and combined on the host as
// the caller's all-reduces would. The losses, lse and the shards' gradients
// side by side are compared with the float64 reference of the whole vocabulary
// (the one cross_entropy_* is tested against); in place equals out of place;
// the CUDA functions are compared with the CPU functions.
//
// Tolerances (u = 2^-24; cross_entropy_*'s own bounds are derived in loss_test.cc):
//   CPU lse and losses, M + log(S) - target in float64 on the host from the
//   kernels' float32 outputs: the shift M cancels exactly (every shard's sum
//   used the same float32 M); each shard's row_sum is rounded once to float32
//   (u relative on S); float32 logits take exp in float32, each term within
//   (8 + M - x_j) u, so S within (8 + spread) u; float64 logits have their
//   target logit rounded to float32 (u |x_t|); the host's float64 sums and log
//   add 1e-15 (1 + |lse|).
//   CPU gradients: cross_entropy_backward_cpu's bounds (cpu_tol) plus 3u on
//   each probability: the global row_sum reaches the kernel through two float32
//   roundings (each shard's sum, then the total) and the scale through one.
//   CUDA: cross_entropy_*_cuda's bounds (cuda_tol) plus 10u on lse for the
//   rescale s * exp(m - M) of each shard's sum (ex2.approx ~2 ulp, and the
//   rounding of (m - M) log2(e), |m - M| <= 8 for logits in [-4, 4)); the
//   gradients cuda_tol plus the same 3u. row_max and target_logit are a max
//   and a copy: exact, so equal bit for bit on both backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/loss/loss.h"
#include "kernels/loss/loss_test_util.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::loss {
namespace {

using namespace test;  // NOLINT: the shared problems, reference and tolerances

constexpr double kU = 0x1p-24;
constexpr float kInf = std::numeric_limits<float>::infinity();

enum class Where { kCpu, kCuda };

// Buffer placement on the device, in elements (CUDA only): shifted logits and
// dlogits (unequal shifts take the one-element path), or dlogits == logits.
struct Layout {
  size_t logits = 0, dlogits = 0;
  bool in_place = false;
};

// Columns [start, start + width) of every row of a problem's logits, as a
// matrix of their own (row stride width).
struct Shard {
  int64_t start = 0, width = 0;
  std::vector<uint8_t> logits;
  int64_t local_real(const Problem& p) const {
    return std::clamp(p.v_real - start, int64_t{0}, width);
  }
};

// `parts` shards of ceil(v / parts) columns, the last one narrower.
std::vector<Shard> split(const Problem& p, int parts) {
  const size_t es = dtype_size(p.dtype);
  const int64_t w = (p.v + parts - 1) / parts;
  std::vector<Shard> shards;
  for (int64_t start = 0; start < p.v; start += w) {
    Shard s;
    s.start = start;
    s.width = std::min(w, p.v - start);
    s.logits.resize(p.n * s.width * es);
    for (int64_t i = 0; i < p.n; ++i) {
      std::memcpy(s.logits.data() + i * s.width * es, p.logits.data() + (i * p.v + start) * es,
                  s.width * es);
    }
    shards.push_back(std::move(s));
  }
  return shards;
}

std::vector<float> poisoned(int64_t n) {
  std::vector<float> v(n);
  testing::poison(v.data(), n * sizeof(float));
  return v;
}

// ---- one shard, one step, on either backend (outputs poisoned first) ---------

struct MaxOut {
  std::vector<float> max, target;
};

MaxOut shard_max(const Problem& p, const Shard& s, Where where) {
  MaxOut o{poisoned(p.n), poisoned(p.n)};
  const int32_t ignore = p.opts.ignore_index;
  if (where == Where::kCpu) {
    const KernelStatus st = vocab_shard_max_cpu(o.max.data(), o.target.data(), s.logits.data(),
                                                p.targets.data(), p.n, s.width, s.start, p.v_real,
                                                ignore, p.dtype);
    EXPECT_TRUE(st.ok()) << st.message();
    return o;
  }
#if COLOSSAL_WITH_CUDA
  const size_t rows = p.n * sizeof(float);
  DeviceBuffer x(s.logits.size(), 0), t(p.n * sizeof(int32_t), 0), m(rows, 0), tl(rows, 0);
  x.upload(s.logits.data(), s.logits.size());
  t.upload(p.targets.data(), p.n * sizeof(int32_t));
  const KernelStatus st = vocab_shard_max_cuda(m.as<float>(), tl.as<float>(), x.ptr(),
                                               t.as<int32_t>(), p.n, s.width, s.start, p.v_real,
                                               ignore, p.dtype, nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  o.max = as_floats(m.download(rows));
  o.target = as_floats(tl.download(rows));
#endif
  return o;
}

std::vector<float> shard_sum_exp(const Problem& p, const Shard& s, const std::vector<float>& gmax,
                                 Where where) {
  std::vector<float> sum = poisoned(p.n);
  if (where == Where::kCpu) {
    const KernelStatus st = vocab_shard_sum_exp_cpu(sum.data(), s.logits.data(), gmax.data(), p.n,
                                                    s.width, s.start, p.v_real, p.dtype);
    EXPECT_TRUE(st.ok()) << st.message();
    return sum;
  }
#if COLOSSAL_WITH_CUDA
  const size_t rows = p.n * sizeof(float);
  DeviceBuffer x(s.logits.size(), 0), m(rows, 0), out(rows, 0);
  x.upload(s.logits.data(), s.logits.size());
  m.upload(gmax.data(), rows);
  const KernelStatus st = vocab_shard_sum_exp_cuda(out.as<float>(), x.ptr(), m.as<float>(), p.n,
                                                   s.width, s.start, p.v_real, p.dtype, nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  sum = as_floats(out.download(rows));
#endif
  return sum;
}

std::vector<uint8_t> shard_backward(const Problem& p, const Shard& s,
                                    const std::vector<float>& gmax, const std::vector<float>& gsum,
                                    float scale, Where where, Layout layout) {
  const size_t bytes = s.logits.size();
  const int32_t ignore = p.opts.ignore_index;
  if (where == Where::kCpu) {
    std::vector<uint8_t> d = s.logits;
    if (!layout.in_place) testing::poison(d.data(), bytes);
    const void* x = layout.in_place ? d.data() : s.logits.data();
    const KernelStatus st =
        vocab_shard_backward_cpu(d.data(), x, gmax.data(), gsum.data(), p.targets.data(), scale,
                                 p.n, s.width, s.start, p.v_real, ignore, p.dtype);
    EXPECT_TRUE(st.ok()) << st.message();
    return d;
  }
  std::vector<uint8_t> d;
#if COLOSSAL_WITH_CUDA
  const size_t es = dtype_size(p.dtype), rows = p.n * sizeof(float);
  DeviceBuffer x(bytes, layout.logits * es), out(bytes, layout.dlogits * es);
  DeviceBuffer t(p.n * sizeof(int32_t), 0), m(rows, 0), sum(rows, 0);
  x.upload(s.logits.data(), bytes);
  t.upload(p.targets.data(), p.n * sizeof(int32_t));
  m.upload(gmax.data(), rows);
  sum.upload(gsum.data(), rows);
  void* dptr = layout.in_place ? x.ptr() : out.ptr();
  const KernelStatus st =
      vocab_shard_backward_cuda(dptr, x.ptr(), m.as<float>(), sum.as<float>(), t.as<int32_t>(),
                                scale, p.n, s.width, s.start, p.v_real, ignore, p.dtype, nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d = layout.in_place ? x.download(bytes) : out.download(bytes);
#endif
  return d;
}

// ---- the shards together, combined as the all-reduces would -----------------

struct Combined {
  std::vector<double> lse, row_loss;                      // per row (0 loss when ignored)
  std::vector<float> shard_max, shard_target, shard_sum;  // every shard's rows, shard after shard
  std::vector<uint8_t> dlogits;                           // n x v: the shards' gradients
};

Combined run_shards(const Problem& p, int parts, float scale, Where where, Layout layout) {
  const std::vector<Shard> shards = split(p, parts);
  Combined c;
  std::vector<float> gmax(p.n, -kInf);
  std::vector<double> target(p.n, 0.0), sum(p.n, 0.0);
  for (const Shard& s : shards) {
    const MaxOut o = shard_max(p, s, where);
    for (int64_t i = 0; i < p.n; ++i) {
      gmax[i] = std::max(gmax[i], o.max[i]);
      target[i] += o.target[i];
    }
    c.shard_max.insert(c.shard_max.end(), o.max.begin(), o.max.end());
    c.shard_target.insert(c.shard_target.end(), o.target.begin(), o.target.end());
  }
  for (const Shard& s : shards) {
    const std::vector<float> part = shard_sum_exp(p, s, gmax, where);
    for (int64_t i = 0; i < p.n; ++i) sum[i] += part[i];
    c.shard_sum.insert(c.shard_sum.end(), part.begin(), part.end());
  }
  std::vector<float> gsum(p.n);
  c.lse.resize(p.n);
  c.row_loss.resize(p.n);
  for (int64_t i = 0; i < p.n; ++i) {
    gsum[i] = static_cast<float>(sum[i]);
    c.lse[i] = gmax[i] + std::log(sum[i]);
    c.row_loss[i] = p.targets[i] == p.opts.ignore_index ? 0.0 : c.lse[i] - target[i];
  }
  const size_t es = dtype_size(p.dtype);
  c.dlogits.resize(p.logits.size());
  for (const Shard& s : shards) {
    const std::vector<uint8_t> g = shard_backward(p, s, gmax, gsum, scale, where, layout);
    for (int64_t i = 0; i < p.n; ++i) {
      std::memcpy(c.dlogits.data() + (i * p.v + s.start) * es, g.data() + i * s.width * es,
                  s.width * es);
    }
  }
  return c;
}

// Each shard's row_max and target_logit exactly (a max and a copy), and a zero
// sum where the shard has no real column.
void expect_shard_rows(const Problem& p, int parts, const Combined& c, const std::string& what) {
  const std::vector<Shard> shards = split(p, parts);
  for (size_t k = 0; k < shards.size(); ++k) {
    const Shard& s = shards[k];
    const int64_t local = s.local_real(p);
    for (int64_t i = 0; i < p.n; ++i) {
      double m = -kInf;
      const int64_t row = i * p.v;
      for (int64_t j = s.start; j < s.start + local; ++j) {
        m = std::max(m, get(p.dtype, p.logits, row + j));
      }
      const int32_t t = p.targets[i];
      const bool here = t != p.opts.ignore_index && t >= s.start && t < s.start + local;
      const float want_target = here ? static_cast<float>(get(p.dtype, p.logits, row + t)) : 0.0f;
      const size_t r = k * p.n + i;
      ASSERT_EQ(c.shard_max[r], static_cast<float>(m)) << what << " shard " << k << " row " << i;
      ASSERT_EQ(c.shard_target[r], want_target) << what << " shard " << k << " row " << i;
      if (local == 0) {
        ASSERT_EQ(c.shard_sum[r], 0.0f) << what << " padding-only shard " << k;
      }
    }
  }
}

double cpu_loss_bound(const Problem& p, const Reference& ref, int64_t i, bool with_target) {
  double b = kU + 1e-15 * (1 + std::fabs(ref.lse[i]));
  if (p.dtype == DType::kF32) b += kU * (8 + ref.spread[i]);
  if (with_target && p.dtype == DType::kF64) {
    b += kU * std::fabs(get(p.dtype, p.logits, i * p.v + p.targets[i]));
  }
  return b;
}

template <typename Bound>
void expect_losses(const Problem& p, const Reference& ref, const Combined& c, Bound bound,
                   const std::string& what) {
  for (int64_t i = 0; i < p.n; ++i) {
    ASSERT_NEAR(c.lse[i], ref.lse[i], bound(i, false)) << what << " lse row " << i;
    if (p.targets[i] == p.opts.ignore_index) continue;
    ASSERT_NEAR(c.row_loss[i], ref.row_loss[i], bound(i, true)) << what << " loss row " << i;
  }
}

Tol shard_grad_tol(Tol t) {
  t.rtol += 3 * kU;
  return t;
}

struct Case {
  int64_t n, v, v_real;
};

// Problem of make_problem whose targets (ignored rows kept) sit on the edges of
// the shards of 2 and 3 parts and of the real vocabulary, in turn.
Problem edge_problem(DType dtype, const Case& cs, Reduction r, uint32_t seed) {
  Problem p = make_problem(dtype, cs.n, cs.v, cs.v_real, r, seed);
  const int64_t w2 = (cs.v + 1) / 2, w3 = (cs.v + 2) / 3;
  const int64_t edges[] = {0, w2 - 1, w2, w3 - 1, w3, 2 * w3 - 1, 2 * w3, cs.v_real - 1};
  int k = static_cast<int>(seed);
  for (int32_t& t : p.targets) {
    if (t == p.opts.ignore_index) continue;
    t = static_cast<int32_t>(std::clamp<int64_t>(edges[k++ % 8], 0, cs.v_real - 1));
  }
  return p;
}

// ---- CPU ----------------------------------------------------------------------

TEST(VocabShardCpuTest, ShardsCombineToWholeVocabulary) {
  const Case cases[] = {{1, 3, 2},       {5, 17, 17},     {4, 20, 13},
                        {7, 1000, 997},  {3, 4097, 4097}, {2, 50304, 50257}};
  uint32_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    for (const Case& cs : cases) {
      const Reduction r = seed % 2 ? Reduction::kSum : Reduction::kMean;
      const Problem p = edge_problem(dtype, cs, r, seed++);
      const Reference ref = reference(p);
      const float scale = static_cast<float>(ref.scale);
      for (int parts : {1, 2, 3}) {
        const std::string what = describe(p) + " parts=" + std::to_string(parts);
        const Combined got = run_shards(p, parts, scale, Where::kCpu, {});
        expect_shard_rows(p, parts, got, what);
        auto bound = [&](int64_t i, bool t) { return cpu_loss_bound(p, ref, i, t); };
        expect_losses(p, ref, got, bound, what);
        expect_grads(p, ref, got.dlogits, shard_grad_tol(cpu_tol(dtype)), what);
        const Combined in_place = run_shards(p, parts, scale, Where::kCpu, {0, 0, true});
        ASSERT_EQ(in_place.dlogits, got.dlogits) << what << " in place";
      }
    }
  }
}

// An ignore_index that is also a class (6); a NaN logit (row 0, in shard 1) is
// passed over by the max but makes the row's sum, loss and gradient NaN; a row
// of -inf in shard 0 (row 1) adds nothing there.
TEST(VocabShardCpuTest, IgnoreIndexClassAndNonFiniteLogits) {
  Problem p = make_problem(DType::kF32, 4, 8, 8, Reduction::kSum, 100);
  p.opts.ignore_index = 6;
  p.targets = {1, 5, 6, 2};
  set(p.dtype, p.logits, 0 * 8 + 5, kNan);
  for (int j = 0; j < 4; ++j) set(p.dtype, p.logits, 1 * 8 + j, -kInf);
  const Combined c = run_shards(p, 2, 1.0f, Where::kCpu, {});
  EXPECT_TRUE(std::isfinite(c.shard_max[1 * 4 + 0])) << "NaN must be passed over by the max";
  EXPECT_TRUE(std::isnan(c.shard_sum[1 * 4 + 0]));
  EXPECT_TRUE(std::isnan(c.row_loss[0]));
  for (int j = 0; j < 8; ++j) EXPECT_TRUE(std::isnan(get(p.dtype, c.dlogits, j))) << j;
  EXPECT_EQ(c.shard_max[0 * 4 + 1], -kInf);
  EXPECT_EQ(c.shard_sum[0 * 4 + 1], 0.0f);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(get(p.dtype, c.dlogits, 1 * 8 + j), 0.0) << j;
  const Reference ref = reference(p);
  // The reference's spread is NaN here (0 * inf): its bound is 8 (finite
  // logits lie in [-4, 4)).
  EXPECT_NEAR(c.row_loss[1], ref.row_loss[1], kU * (9 + 8) + 1e-15 * (1 + ref.lse[1]));
  for (int k = 0; k < 2; ++k) EXPECT_EQ(c.shard_target[k * 4 + 2], 0.0f) << "ignored row";
  for (int j = 0; j < 8; ++j) EXPECT_EQ(get(p.dtype, c.dlogits, 2 * 8 + j), 0.0) << j;
  EXPECT_NEAR(c.row_loss[3], ref.row_loss[3], cpu_loss_bound(p, ref, 3, true));
}

TEST(VocabShardCpuTest, RejectsBadArguments) {
  using Code = KernelStatus::Code;
  const DType f32 = DType::kF32;
  // A shard of 4 columns at global ids [4, 8) of a 7-id vocabulary, 2 rows.
  const float x[8] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.5f, 3.0f, 1.0f};
  float m[2] = {7, 7}, tl[2] = {7, 7}, sum[2] = {1, 1}, d[8] = {};
  const int32_t good[2] = {5, 1};
  auto max = [&](const int32_t* t, int64_t v, int64_t v_start, int64_t v_real) {
    return vocab_shard_max_cpu(m, tl, x, t, 2, v, v_start, v_real, -100, f32).code();
  };
  auto backward = [&](void* dl, const void* logits, const int32_t* t) {
    return vocab_shard_backward_cpu(dl, logits, m, sum, t, 1.0f, 2, 4, 4, 7, -100, f32).code();
  };
  EXPECT_EQ(max(good, 4, 4, 7), Code::kOk);
  EXPECT_EQ(backward(d, x, good), Code::kOk);
  // Targets outside [0, v_real) (7 is padding): invalid_argument, nothing written.
  for (int32_t bad : {-1, 7, 8, 1000, std::numeric_limits<int32_t>::max(),
                      std::numeric_limits<int32_t>::min()}) {
    const int32_t t[2] = {1, bad};
    m[0] = tl[0] = 7.0f;
    d[0] = 7.0f;
    EXPECT_EQ(max(t, 4, 4, 7), Code::kInvalidArgument) << bad;
    EXPECT_EQ(backward(d, x, t), Code::kInvalidArgument) << bad;
    EXPECT_EQ(m[0], 7.0f);
    EXPECT_EQ(tl[0], 7.0f);
    EXPECT_EQ(d[0], 7.0f);
  }
  EXPECT_EQ(max(good, 4, -1, 7), Code::kInvalidArgument);  // negative v_start
  EXPECT_EQ(max(good, 0, 4, 7), Code::kInvalidArgument);   // no columns
  EXPECT_EQ(max(good, 4, 4, 0), Code::kInvalidArgument);   // no vocabulary
  EXPECT_EQ(max(nullptr, 4, 4, 7), Code::kInvalidArgument);
  EXPECT_EQ(vocab_shard_max_cpu(m, nullptr, x, good, 2, 4, 4, 7, -100, f32).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(vocab_shard_max_cpu(m, tl, x, good, 2, 4, 4, 7, -100, DType::kI32).code(),
            Code::kUnsupported);
  EXPECT_EQ(vocab_shard_sum_exp_cpu(sum, x, nullptr, 2, 4, 4, 7, f32).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(vocab_shard_sum_exp_cpu(sum, reinterpret_cast<const uint8_t*>(x) + 1, m, 1, 4, 4, 7,
                                    f32)
                .code(),
            Code::kInvalidArgument);  // misaligned
  EXPECT_EQ(vocab_shard_backward_cpu(d, x, m, nullptr, good, 1.0f, 2, 4, 4, 7, -100, f32).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(backward(nullptr, x, good), Code::kInvalidArgument);
  float both[9] = {};
  EXPECT_EQ(vocab_shard_backward_cpu(both + 1, both, m, sum, good, 1.0f, 2, 4, 4, 7, -100, f32)
                .code(),
            Code::kInvalidArgument);  // partial overlap
  EXPECT_EQ(backward(both, both, good), Code::kOk);  // exact aliasing: in place
  // n == 0: nothing to do, nothing read.
  EXPECT_EQ(vocab_shard_max_cpu(nullptr, nullptr, nullptr, nullptr, 0, 4, 4, 7, -100, f32).code(),
            Code::kOk);
  EXPECT_EQ(vocab_shard_backward_cpu(nullptr, nullptr, nullptr, nullptr, nullptr, 1.0f, 0, 4, 4, 7,
                                     -100, f32)
                .code(),
            Code::kOk);
}

// ---- CUDA ---------------------------------------------------------------------

#if COLOSSAL_WITH_CUDA
double cuda_loss_bound(const Problem& p, const Reference& ref, int64_t i) {
  return cuda_tol(p.dtype).loss * std::max(1.0, std::fabs(ref.lse[i])) + 10 * kU;
}
#endif

TEST(VocabShardCudaTest, MatchesCpuAndReference) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const Case cases[] = {{1, 3, 2},         {40, 17, 17},       {33, 20, 13},
                        {600, 4097, 4097}, {24, 50304, 50257}, {6, 128256, 128256}};
  const Layout layouts[] = {{0, 0, false}, {1, 1, false}, {3, 1, false}, {0, 0, true}};
  uint32_t seed = 5000;
  int variant = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const Case& cs : cases) {
      const Reduction r = seed % 2 ? Reduction::kSum : Reduction::kMean;
      const Problem p = edge_problem(dtype, cs, r, seed++);
      const Reference ref = reference(p);
      const float scale = static_cast<float>(ref.scale);
      const Tol tol = shard_grad_tol(cuda_tol(dtype));
      for (int parts : {2, 3}) {
        const Layout layout = layouts[variant++ % 4];
        const std::string what = describe(p) + " parts=" + std::to_string(parts) + " misalign " +
                                 std::to_string(layout.logits) + "/" +
                                 std::to_string(layout.dlogits) +
                                 (layout.in_place ? " in place" : "");
        const Combined cpu = run_shards(p, parts, scale, Where::kCpu, {});
        const Combined gpu = run_shards(p, parts, scale, Where::kCuda, layout);
        expect_shard_rows(p, parts, gpu, what);
        ASSERT_EQ(gpu.shard_max, cpu.shard_max) << what;
        ASSERT_EQ(gpu.shard_target, cpu.shard_target) << what;
        auto bound = [&](int64_t i, bool) { return cuda_loss_bound(p, ref, i); };
        expect_losses(p, ref, gpu, bound, "cuda " + what);
        expect_grads(p, ref, gpu.dlogits, tol, "cuda " + what);
        // And against the CPU shards' own outputs: both bounds.
        Reference cpu_ref = ref;
        cpu_ref.lse = cpu.lse;
        cpu_ref.row_loss = cpu.row_loss;
        for (int64_t i = 0; i < p.n * p.v; ++i) cpu_ref.grad[i] = get(p.dtype, cpu.dlogits, i);
        auto both = [&](int64_t i, bool t) {
          return cuda_loss_bound(p, ref, i) + cpu_loss_bound(p, ref, i, t);
        };
        expect_losses(p, cpu_ref, gpu, both, "cuda vs cpu " + what);
        expect_grads(p, cpu_ref, gpu.dlogits, tol, "cuda vs cpu " + what);
      }
    }
  }
#endif
}

TEST(VocabShardCudaTest, InPlaceMatchesOutOfPlace) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 5500;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Case& cs : {Case{7, 17, 17}, Case{64, 50304, 50257}, Case{5, 4097, 4000}}) {
      const Problem p = make_problem(dtype, cs.n, cs.v, cs.v_real, Reduction::kSum, seed++);
      const Combined out = run_shards(p, 2, p.dloss, Where::kCuda, {0, 0, false});
      const Combined in = run_shards(p, 2, p.dloss, Where::kCuda, {0, 0, true});
      EXPECT_EQ(in.dlogits, out.dlogits) << describe(p);
    }
  }
#endif
}

// A target outside [0, v_real): NaN target logit on every shard (so the summed
// loss is NaN), NaN gradient row on every shard, no access outside the buffers
// (guard bands), other rows finite.
TEST(VocabShardCudaTest, OutOfRangeTargetsGiveNaNOnEveryShard) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Problem p = make_problem(dtype, 8, 1030, 1000, Reduction::kSum, 5600);
    for (int32_t bad : kBadTargets) {
      p.targets[2] = bad;
      for (const Shard& s : split(p, 3)) {
        const MaxOut o = shard_max(p, s, Where::kCuda);
        const std::vector<float> ones(p.n, 1.0f);
        const std::vector<uint8_t> g =
            shard_backward(p, s, o.max, ones, 1.0f, Where::kCuda, {1, 1, false});
        EXPECT_TRUE(std::isnan(o.target[2])) << bad << " shard at " << s.start;
        EXPECT_TRUE(std::isfinite(o.max[2])) << bad;
        for (int64_t j = 0; j < s.width; ++j) {
          ASSERT_TRUE(std::isnan(get(dtype, g, 2 * s.width + j))) << bad << " column " << j;
        }
        for (int64_t i : {0, 1, 4, 7}) {
          ASSERT_TRUE(std::isfinite(o.target[i])) << i;
          ASSERT_FALSE(std::isnan(get(dtype, g, i * s.width))) << i;
        }
      }
    }
  }
#endif
}

TEST(VocabShardCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  using Code = KernelStatus::Code;
  DeviceBuffer buf(4096, 0);
  float* f = buf.as<float>();
  const int32_t* t = buf.as<int32_t>();
  const DType f32 = DType::kF32;
  EXPECT_EQ(vocab_shard_max_cuda(f, f, f, t, 2, 4, 0, 4, -100, DType::kF64, nullptr).code(),
            Code::kUnsupported);
  EXPECT_EQ(vocab_shard_max_cuda(f, nullptr, f, t, 2, 4, 0, 4, -100, f32, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(vocab_shard_max_cuda(f, f, f, t, 2, 4, -1, 4, -100, f32, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(vocab_shard_sum_exp_cuda(f, f, f, 1, int64_t{1} << 31, 0, 4, f32, nullptr).code(),
            Code::kInvalidArgument);  // v > 2^30
  EXPECT_EQ(vocab_shard_backward_cuda(f, f, f, nullptr, t, 1.0f, 2, 3, 0, 3, -100, f32, nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(vocab_shard_backward_cuda(f + 1, f, f, f, t, 1.0f, 2, 3, 0, 3, -100, f32, nullptr)
                .code(),
            Code::kInvalidArgument);  // partial overlap
  EXPECT_TRUE(vocab_shard_sum_exp_cuda(nullptr, nullptr, nullptr, 0, 4, 0, 4, f32, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
#endif
}

}  // namespace
}  // namespace colossal::kernels::loss
