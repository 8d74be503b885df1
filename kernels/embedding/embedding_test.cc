// kernels/embedding: the CPU path against float64/long double references and
// finite differences, the gradient contract (dwte and dwpe accumulate, rows not
// addressed stay bit-identical), token validation, and the CUDA path against
// the CPU path: forward bit for bit, backward within float32-summation
// tolerances in both modes, the deterministic mode bit-identical across reruns
// with heavy token repetition.
#include "kernels/embedding/embedding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "kernels/embedding/embedding_test_util.h"
#include "tests/util/gpu_test.h"
#include "tests/util/host_buffer.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::embedding {
namespace {

using Code = KernelStatus::Code;
using namespace test;  // NOLINT: the shared ids, references and buffers

// The forward's reference: out in long double.
std::vector<long double> reference_forward(const Buf& wte, const Buf& wpe, const std::vector<int32_t>& tok,
                                           const Shape& s) {
  std::vector<long double> out(s.positions() * s.channels);
  for (int64_t p = 0; p < s.positions(); ++p) {
    for (int64_t c = 0; c < s.channels; ++c) {
      out[p * s.channels + c] = static_cast<long double>(wte.get(tok[p] * s.channels + c)) +
                                wpe.get((p % s.seq_len) * s.channels + c);
    }
  }
  return out;
}

const Shape kCpuShapes[] = {{1, 1, 1, 1, 1}, {2, 3, 5, 7, 4}, {3, 17, 24, 50, 20}, {2, 100, 64, 1000, 128}};
constexpr DType kCpuTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};

// ------------------------------------------------------------------ CPU ----

TEST(EmbeddingCpuTest, ForwardMatchesReference) {
  uint32_t seed = 1;
  for (DType dtype : kCpuTypes) {
    for (const Shape& s : kCpuShapes) {
      const Buf wte = Buf::random(dtype, s.vocab * s.channels, seed++);
      const Buf wpe = Buf::random(dtype, s.max_seq_len * s.channels, seed++);
      const auto tok = make_tokens(Ids::kZipf, s.positions(), s.vocab, seed++);
      Buf out(dtype, s.positions() * s.channels);
      ASSERT_TRUE(embedding_forward_cpu(out.data(), tok.data(), wte.data(), wpe.data(), s.batch, s.seq_len,
                                        s.channels, s.vocab, s.max_seq_len, dtype).ok());
      const auto want = reference_forward(wte, wpe, tok, s);
      for (int64_t i = 0; i < out.size(); ++i) {
        const double w = static_cast<double>(want[i]);
        ASSERT_LE(std::fabs(out.get(i) - w), round_tol(dtype) * std::fabs(w) + 1e-300)
            << dtype_name(dtype) << " " << s.str() << " i=" << i;
      }
    }
  }
}

TEST(EmbeddingCpuTest, BackwardAccumulatesAndMatchesReference) {
  uint32_t seed = 100;
  for (Types ty : kCpuGradTypes) {
    for (const Shape& s : kCpuShapes) {
      for (Ids ids : {Ids::kUniform, Ids::kAllEqual, Ids::kZipf}) {
        const std::string what = std::string(dtype_name(ty.dtype)) + "/" + dtype_name(ty.grad) + " " + s.str() +
                                  " " + ids_name(ids);
        const Buf dout = Buf::random(ty.dtype, s.positions() * s.channels, seed++);
        const auto tok = make_tokens(ids, s.positions(), s.vocab, seed++);
        const Buf dwte0 = Buf::random(ty.grad, s.vocab * s.channels, seed++, -3.0f, 3.0f);
        const Buf dwpe0 = Buf::random(ty.grad, s.max_seq_len * s.channels, seed++, -3.0f, 3.0f);
        Buf dwte = dwte0, dwpe = dwpe0;
        ASSERT_TRUE(embedding_backward_cpu(dwte.data(), dwpe.data(), dout.data(), tok.data(), s.batch, s.seq_len,
                                           s.channels, s.vocab, s.max_seq_len, ty.dtype, ty.grad).ok())
            << what;
        const GradRef ref = reference_backward(dwte0, dwpe0, dout, tok, s);
        expect_grads(dwte, dwpe, dwte0, dwpe0, ref, s, 1e-12, what);
        // A second call adds the same sums again (+=, not =).
        const Buf dwte1 = dwte, dwpe1 = dwpe;
        ASSERT_TRUE(embedding_backward_cpu(dwte.data(), dwpe.data(), dout.data(), tok.data(), s.batch, s.seq_len,
                                           s.channels, s.vocab, s.max_seq_len, ty.dtype, ty.grad).ok());
        expect_grads(dwte, dwpe, dwte1, dwpe1, reference_backward(dwte1, dwpe1, dout, tok, s), s, 1e-12,
                     what + " (2nd call)");
      }
    }
  }
}

// L = sum(dout * out); central differences in float64 for every element of wte and wpe.
TEST(EmbeddingCpuTest, BackwardFiniteDifferencesFloat64) {
  const Shape s{2, 3, 4, 5, 4};
  const DType f64 = DType::kF64;
  const std::vector<int32_t> tok = {3, 1, 3, 3, 0, 1};  // repeats, and ids 2, 4 absent
  const Buf wte = Buf::random(f64, s.vocab * s.channels, 1);
  const Buf wpe = Buf::random(f64, s.max_seq_len * s.channels, 2);
  const Buf dout = Buf::random(f64, s.positions() * s.channels, 3);
  const Buf dwte0 = Buf::random(f64, wte.size(), 4), dwpe0 = Buf::random(f64, wpe.size(), 5);
  Buf dwte = dwte0, dwpe = dwpe0;
  ASSERT_TRUE(embedding_backward_cpu(dwte.data(), dwpe.data(), dout.data(), tok.data(), s.batch, s.seq_len,
                                     s.channels, s.vocab, s.max_seq_len, f64, f64).ok());
  auto loss = [&](const Buf& e, const Buf& q) {
    Buf out(f64, s.positions() * s.channels);
    EXPECT_TRUE(embedding_forward_cpu(out.data(), tok.data(), e.data(), q.data(), s.batch, s.seq_len, s.channels,
                                      s.vocab, s.max_seq_len, f64).ok());
    double l = 0;
    for (int64_t i = 0; i < out.size(); ++i) l += dout.get(i) * out.get(i);
    return l;
  };
  const double h = 1e-4;
  for (int64_t i = 0; i < wte.size(); ++i) {
    Buf p = wte, m = wte;
    p.set(i, wte.get(i) + h);
    m.set(i, wte.get(i) - h);
    ASSERT_NEAR(dwte.get(i) - dwte0.get(i), (loss(p, wpe) - loss(m, wpe)) / (2 * h), 1e-9) << "dwte " << i;
  }
  for (int64_t i = 0; i < wpe.size(); ++i) {
    Buf p = wpe, m = wpe;
    p.set(i, wpe.get(i) + h);
    m.set(i, wpe.get(i) - h);
    ASSERT_NEAR(dwpe.get(i) - dwpe0.get(i), (loss(wte, p) - loss(wte, m)) / (2 * h), 1e-9) << "dwpe " << i;
  }
}

// No position table (wpe and dwpe null, Llama's embed_tokens): the forward
// copies the token rows exactly, the backward adds to dwte exactly what it adds
// with a position table.
TEST(EmbeddingCpuTest, TokenOnlyCopiesRowsAndAccumulatesDwte) {
  uint32_t seed = 500;
  for (DType dtype : kCpuTypes) {
    for (const Shape& s : kCpuShapes) {
      const std::string what = std::string(dtype_name(dtype)) + " " + s.str();
      const Buf wte = Buf::random(dtype, s.vocab * s.channels, seed++);
      const auto tok = make_tokens(Ids::kZipf, s.positions(), s.vocab, seed++);
      Buf out = Buf::random(dtype, s.positions() * s.channels, seed++);  // poisoned
      ASSERT_TRUE(embedding_forward_cpu(out.data(), tok.data(), wte.data(), nullptr, s.batch, s.seq_len,
                                        s.channels, s.vocab, s.max_seq_len, dtype).ok()) << what;
      for (int64_t p = 0; p < s.positions(); ++p) {
        for (int64_t c = 0; c < s.channels; ++c) {
          ASSERT_EQ(out.get(p * s.channels + c), wte.get(tok[p] * s.channels + c)) << what << " p=" << p;
        }
      }
      const Buf dout = Buf::random(dtype, s.positions() * s.channels, seed++);
      const Buf dwte0 = Buf::random(dtype, s.vocab * s.channels, seed++, -3.0f, 3.0f);
      Buf dwpe = Buf::random(dtype, s.max_seq_len * s.channels, seed++);
      Buf with_table = dwte0, without = dwte0;
      ASSERT_TRUE(embedding_backward_cpu(with_table.data(), dwpe.data(), dout.data(), tok.data(), s.batch,
                                         s.seq_len, s.channels, s.vocab, s.max_seq_len, dtype, dtype).ok());
      ASSERT_TRUE(embedding_backward_cpu(without.data(), nullptr, dout.data(), tok.data(), s.batch, s.seq_len,
                                         s.channels, s.vocab, s.max_seq_len, dtype, dtype).ok()) << what;
      ASSERT_TRUE(without.same_bits(with_table)) << what;
      ASSERT_FALSE(without.same_bits(dwte0)) << what;
    }
  }
}

TEST(EmbeddingCpuTest, RejectsInvalidTokensWithoutWriting) {
  const Shape s{2, 3, 4, 5, 3};
  const Buf wte = Buf::random(DType::kF32, 20, 1), wpe = Buf::random(DType::kF32, 12, 2);
  const Buf dout = Buf::random(DType::kF32, 24, 3);
  for (int32_t bad : {-1, 5, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}) {
    std::vector<int32_t> tok = {0, 1, 2, 3, 4, 0};
    tok[4] = bad;
    Buf out(DType::kF32, 24);
    const Buf out0 = out;
    EXPECT_EQ(embedding_forward_cpu(out.data(), tok.data(), wte.data(), wpe.data(), s.batch, s.seq_len, s.channels,
                                    s.vocab, s.max_seq_len, DType::kF32).code(),
              Code::kInvalidArgument);
    EXPECT_TRUE(out.same_bits(out0));
    Buf dwte = wte, dwpe = wpe;
    EXPECT_EQ(embedding_backward_cpu(dwte.data(), dwpe.data(), dout.data(), tok.data(), s.batch, s.seq_len,
                                     s.channels, s.vocab, s.max_seq_len, DType::kF32, DType::kF32).code(),
              Code::kInvalidArgument);
    EXPECT_TRUE(dwte.same_bits(wte));
    EXPECT_TRUE(dwpe.same_bits(wpe));
  }
}

TEST(EmbeddingCpuTest, RejectsBadArguments) {
  float a[64] = {}, b[64] = {}, c[64] = {};
  int32_t tok[4] = {0, 1, 0, 1};
  const DType f32 = DType::kF32;
  EXPECT_EQ(embedding_forward_cpu(nullptr, tok, a, b, 2, 2, 4, 2, 2, f32).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_forward_cpu(c, nullptr, a, b, 2, 2, 4, 2, 2, f32).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_forward_cpu(c, tok, a, b, 2, 3, 4, 2, 2, f32).code(), Code::kInvalidArgument);  // T > maxT
  EXPECT_EQ(embedding_forward_cpu(c, tok, a, b, -2, 2, 4, 2, 2, f32).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_forward_cpu(c, tok, a, b, 2, 2, 4, 2, 2, DType::kI32).code(), Code::kUnsupported);
  EXPECT_TRUE(embedding_forward_cpu(nullptr, nullptr, nullptr, nullptr, 0, 2, 4, 2, 2, f32).ok());
  EXPECT_EQ(embedding_backward_cpu(nullptr, b, c, tok, 2, 2, 4, 2, 2, f32, f32).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_forward_cpu(c, tok, nullptr, b, 2, 2, 4, 2, 2, f32).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_backward_cpu(a, b, c, tok, 2, 2, -4, 2, 2, f32, f32).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_backward_cpu(a, b, c, tok, 2, 2, 4, 2, 2, DType::kBF16, DType::kF16).code(),
            Code::kUnsupported);
  EXPECT_EQ(embedding_backward_cpu(a, b, c, tok, 2, 2, 4, 2, 2, DType::kF64, DType::kF32).code(),
            Code::kUnsupported);
  EXPECT_EQ(embedding_backward_cpu(a, b, c, tok, 2, 2, 4, 2, 2, DType::kU8, DType::kU8).code(), Code::kUnsupported);
  EXPECT_TRUE(embedding_backward_cpu(nullptr, nullptr, nullptr, nullptr, 2, 2, 0, 2, 2, f32, f32).ok());
  EXPECT_STREQ(grad_mode_name(GradMode::kAtomic), "atomic");
  EXPECT_STREQ(grad_mode_name(GradMode::kDeterministic), "deterministic");
}

TEST(EmbeddingCpuTest, ScratchBytes) {
  EXPECT_EQ(embedding_backward_scratch_bytes(8, 1024, 768, GradMode::kAtomic), 0u);
  EXPECT_EQ(embedding_backward_scratch_bytes(0, 1024, 768, GradMode::kDeterministic), 0u);
  EXPECT_EQ(embedding_backward_scratch_bytes(8, 1024, 0, GradMode::kDeterministic), 0u);
  // 8192 keys of 8 bytes, then two partial arrays of 256 tiles x 768 floats.
  EXPECT_EQ(embedding_backward_scratch_bytes(8, 1024, 768, GradMode::kDeterministic),
            size_t{8192} * 8 + 2 * size_t{256} * 768 * 4);
  // 3 positions: 4 padded keys (256-byte section), 1 tile of 5 floats (256-byte sections).
  EXPECT_EQ(embedding_backward_scratch_bytes(1, 3, 5, GradMode::kDeterministic), 3u * 256);
}

// ----------------------------------------------------------------- CUDA ----

#if COLOSSAL_WITH_CUDA
constexpr DType kCudaTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

const Shape kCudaShapes[] = {
    {1, 1, 1, 1, 1},     {2, 3, 5, 7, 4},        {3, 17, 24, 50, 20}, {4, 64, 768, 1000, 64},
    {2, 2500, 64, 500, 2500},  // 5000 positions: 8192 padded keys, global sort steps
    {1, 17000, 8, 300, 17000},  // 32768 padded keys, runs over hundreds of tiles
    {3, 33, 17, 40, 40},        // scalar path (17 channels)
};

// Runs embedding_backward_cuda on fresh device copies and fetches the results.
struct BackwardRun {
  Buf dwte, dwpe;
  int32_t flag = -1;
};
void run_backward(const Buf& dwte0, const Buf& dwpe0, const Buf& dout, const std::vector<int32_t>& tok,
                  const Shape& s, DType dtype, DType grad, GradMode mode, int64_t offset, BackwardRun* run,
                  const std::string& what) {
  DeviceBuf d_dwte(dwte0, offset), d_dwpe(dwpe0, offset), d_dout(dout, offset);
  DeviceBuf d_tok(tok.data(), sizeof(int32_t), s.positions(), 0);
  const int32_t zero = 0;
  DeviceBuf d_flag(&zero, sizeof(int32_t), 1, 0);
  ASSERT_TRUE(d_dwte.ok() && d_dwpe.ok() && d_dout.ok() && d_tok.ok() && d_flag.ok()) << what;
  const size_t scratch_bytes = embedding_backward_scratch_bytes(s.batch, s.seq_len, s.channels, mode);
  void* scratch = nullptr;
  if (scratch_bytes > 0) {
    CUDA_OK(cudaMalloc(&scratch, scratch_bytes));
    CUDA_OK(cudaMemset(scratch, 0xA5, scratch_bytes));
  }
  const KernelStatus st = embedding_backward_cuda(d_dwte.ptr(), d_dwpe.ptr(), d_flag.ptr<int32_t>(), d_dout.ptr(),
                                                  d_tok.ptr<int32_t>(), scratch, scratch_bytes, s.batch, s.seq_len,
                                                  s.channels, s.vocab, s.max_seq_len, dtype, grad, mode, nullptr);
  ASSERT_TRUE(st.ok()) << what << ": " << st.message();
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaFree(scratch));
  run->dwte = Buf(grad, dwte0.size());
  run->dwpe = Buf(grad, dwpe0.size());
  d_dwte.fetch(&run->dwte, what + " dwte");
  d_dwpe.fetch(&run->dwpe, what + " dwpe");
  d_flag.fetch(&run->flag, what + " flag");
}
#endif

TEST(EmbeddingCudaTest, ForwardMatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 1000;
  for (DType dtype : kCudaTypes) {
    for (const Shape& s : kCudaShapes) {
      for (int64_t offset : {0, 1}) {
        const std::string what = std::string(dtype_name(dtype)) + " " + s.str() + " offset " + std::to_string(offset);
        const Buf wte = Buf::random(dtype, s.vocab * s.channels, seed++);
        const Buf wpe = Buf::random(dtype, s.max_seq_len * s.channels, seed++);
        const auto tok = make_tokens(Ids::kZipf, s.positions(), s.vocab, seed++);
        Buf want(dtype, s.positions() * s.channels);
        ASSERT_TRUE(embedding_forward_cpu(want.data(), tok.data(), wte.data(), wpe.data(), s.batch, s.seq_len,
                                          s.channels, s.vocab, s.max_seq_len, dtype).ok());
        DeviceBuf d_wte(wte, offset), d_wpe(wpe, offset), d_out(Buf(dtype, want.size()), offset);
        DeviceBuf d_tok(tok.data(), sizeof(int32_t), s.positions(), 0);
        const int32_t zero = 0;
        DeviceBuf d_flag(&zero, sizeof(int32_t), 1, 0);
        ASSERT_TRUE(d_wte.ok() && d_wpe.ok() && d_out.ok() && d_tok.ok() && d_flag.ok());
        ASSERT_TRUE(embedding_forward_cuda(d_out.ptr(), d_flag.ptr<int32_t>(), d_tok.ptr<int32_t>(), d_wte.ptr(),
                                           d_wpe.ptr(), s.batch, s.seq_len, s.channels, s.vocab, s.max_seq_len,
                                           dtype, nullptr).ok());
        CUDA_OK(cudaDeviceSynchronize());
        Buf got(dtype, want.size());
        int32_t flag = -1;
        d_out.fetch(&got, what);
        d_flag.fetch(&flag, what);
        EXPECT_EQ(flag, 0) << what;
        ASSERT_TRUE(got.same_bits(want)) << what;
      }
    }
  }
#endif
}

TEST(EmbeddingCudaTest, ForwardInvalidTokensFlaggedAndContained) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (DType dtype : kCudaTypes) {
    const Shape s{2, 9, 24, 11, 9};
    const Buf wte = Buf::random(dtype, s.vocab * s.channels, 5), wpe = Buf::random(dtype, s.max_seq_len * s.channels, 6);
    std::vector<int32_t> tok = make_tokens(Ids::kUniform, s.positions(), s.vocab, 7);
    const std::vector<int64_t> bad_at = {0, 5, 9, 17};
    const int32_t bad_ids[] = {-1, 11, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
    std::vector<int32_t> fixed = tok;
    for (size_t k = 0; k < bad_at.size(); ++k) tok[bad_at[k]] = bad_ids[k], fixed[bad_at[k]] = 0;
    Buf want(dtype, s.positions() * s.channels);
    ASSERT_TRUE(embedding_forward_cpu(want.data(), fixed.data(), wte.data(), wpe.data(), s.batch, s.seq_len,
                                      s.channels, s.vocab, s.max_seq_len, dtype).ok());
    DeviceBuf d_wte(wte, 0), d_wpe(wpe, 0), d_out(Buf(dtype, want.size()), 0);
    DeviceBuf d_tok(tok.data(), sizeof(int32_t), s.positions(), 0);
    const int32_t zero = 0;
    DeviceBuf d_flag(&zero, sizeof(int32_t), 1, 0);
    ASSERT_TRUE(d_wte.ok() && d_wpe.ok() && d_out.ok() && d_tok.ok() && d_flag.ok());
    ASSERT_TRUE(embedding_forward_cuda(d_out.ptr(), d_flag.ptr<int32_t>(), d_tok.ptr<int32_t>(), d_wte.ptr(),
                                       d_wpe.ptr(), s.batch, s.seq_len, s.channels, s.vocab, s.max_seq_len, dtype,
                                       nullptr).ok());
    CUDA_OK(cudaDeviceSynchronize());
    Buf got(dtype, want.size());
    int32_t flag = 0;
    d_out.fetch(&got, dtype_name(dtype));
    d_flag.fetch(&flag, dtype_name(dtype));
    EXPECT_EQ(flag, 1);
    for (int64_t p = 0; p < s.positions(); ++p) {
      const bool bad = std::find(bad_at.begin(), bad_at.end(), p) != bad_at.end();
      for (int64_t c = 0; c < s.channels; ++c) {
        const int64_t i = p * s.channels + c;
        if (bad) {
          ASSERT_TRUE(std::isnan(got.get(i))) << dtype_name(dtype) << " p=" << p;
        } else {
          ASSERT_EQ(got.get(i), want.get(i)) << dtype_name(dtype) << " p=" << p;
        }
      }
    }
  }
#endif
}

TEST(EmbeddingCudaTest, BackwardMatchesCpuBothModes) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 2000;
  for (Types ty : kCudaGradTypes) {
    for (const Shape& s : kCudaShapes) {
      for (Ids ids : {Ids::kUniform, Ids::kAllEqual, Ids::kZipf}) {
        const Buf dout = Buf::random(ty.dtype, s.positions() * s.channels, seed++);
        const auto tok = make_tokens(ids, s.positions(), s.vocab, seed++);
        const Buf dwte0 = Buf::random(ty.grad, s.vocab * s.channels, seed++, -3.0f, 3.0f);
        const Buf dwpe0 = Buf::random(ty.grad, s.max_seq_len * s.channels, seed++, -3.0f, 3.0f);
        const GradRef ref = reference_backward(dwte0, dwpe0, dout, tok, s);
        for (GradMode mode : {GradMode::kDeterministic, GradMode::kAtomic}) {
          if (mode == GradMode::kAtomic && ty.grad != DType::kF32) continue;
          for (int64_t offset : {0, 1}) {
            const std::string what = std::string(dtype_name(ty.dtype)) + "/" + dtype_name(ty.grad) + " " + s.str() +
                                     " " + ids_name(ids) + " " + grad_mode_name(mode) + " offset " +
                                     std::to_string(offset);
            BackwardRun run;
            run_backward(dwte0, dwpe0, dout, tok, s, ty.dtype, ty.grad, mode, offset, &run, what);
            if (::testing::Test::HasFatalFailure()) return;
            EXPECT_EQ(run.flag, 0) << what;
            expect_grads(run.dwte, run.dwpe, dwte0, dwpe0, ref, s, kSumTol, what);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
#endif
}

// No position table on CUDA: the forward equals the CPU's copy bit for bit,
// the backward's dwte equals the run with a position table (deterministic
// mode: bit for bit) and the reference (atomic mode).
TEST(EmbeddingCudaTest, TokenOnlyMatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 2500;
  for (DType dtype : kCudaTypes) {
    for (const Shape& s : kCudaShapes) {
      const std::string what = std::string(dtype_name(dtype)) + " " + s.str();
      const Buf wte = Buf::random(dtype, s.vocab * s.channels, seed++);
      const auto tok = make_tokens(Ids::kZipf, s.positions(), s.vocab, seed++);
      Buf want(dtype, s.positions() * s.channels);
      ASSERT_TRUE(embedding_forward_cpu(want.data(), tok.data(), wte.data(), nullptr, s.batch, s.seq_len,
                                        s.channels, s.vocab, s.max_seq_len, dtype).ok());
      DeviceBuf d_wte(wte, 0), d_out(Buf::random(dtype, want.size(), seed++), 0);
      DeviceBuf d_tok(tok.data(), sizeof(int32_t), s.positions(), 0);
      ASSERT_TRUE(d_wte.ok() && d_out.ok() && d_tok.ok());
      ASSERT_TRUE(embedding_forward_cuda(d_out.ptr(), nullptr, d_tok.ptr<int32_t>(), d_wte.ptr(), nullptr,
                                         s.batch, s.seq_len, s.channels, s.vocab, s.max_seq_len, dtype,
                                         nullptr).ok());
      CUDA_OK(cudaDeviceSynchronize());
      Buf got(dtype, want.size());
      d_out.fetch(&got, what);
      ASSERT_TRUE(got.same_bits(want)) << what;
      for (DType grad : {dtype, DType::kF32}) {
        const Buf dout = Buf::random(dtype, s.positions() * s.channels, seed++);
        const Buf dwte0 = Buf::random(grad, s.vocab * s.channels, seed++, -3.0f, 3.0f);
        const Buf dwpe0 = Buf::random(grad, s.max_seq_len * s.channels, seed++, -3.0f, 3.0f);
        const GradRef ref = reference_backward(dwte0, dwpe0, dout, tok, s);
        for (GradMode mode : {GradMode::kDeterministic, GradMode::kAtomic}) {
          if (mode == GradMode::kAtomic && grad != DType::kF32) continue;
          const std::string w = what + "/" + dtype_name(grad) + " " + grad_mode_name(mode);
          BackwardRun with_table;
          run_backward(dwte0, dwpe0, dout, tok, s, dtype, grad, mode, 0, &with_table, w);
          if (::testing::Test::HasFatalFailure()) return;
          DeviceBuf d_dwte(dwte0, 0), d_dout(dout, 0);
          ASSERT_TRUE(d_dwte.ok() && d_dout.ok()) << w;
          const size_t bytes = embedding_backward_scratch_bytes(s.batch, s.seq_len, s.channels, mode);
          void* scratch = nullptr;
          if (bytes > 0) {
            CUDA_OK(cudaMalloc(&scratch, bytes));
          }
          ASSERT_TRUE(embedding_backward_cuda(d_dwte.ptr(), nullptr, nullptr, d_dout.ptr(), d_tok.ptr<int32_t>(),
                                              scratch, bytes, s.batch, s.seq_len, s.channels, s.vocab,
                                              s.max_seq_len, dtype, grad, mode, nullptr).ok()) << w;
          CUDA_OK(cudaDeviceSynchronize());
          CUDA_OK(cudaFree(scratch));
          Buf dwte(grad, dwte0.size());
          d_dwte.fetch(&dwte, w);
          if (mode == GradMode::kDeterministic) {
            ASSERT_TRUE(dwte.same_bits(with_table.dwte)) << w;
          } else {
            GradRef untouched_table = ref;  // dwpe was not passed: it keeps its start values
            for (int64_t i = 0; i < dwpe0.size(); ++i) {
              untouched_table.dwpe[i] = dwpe0.get(i);
              untouched_table.dwpe_abs[i] = std::fabs(dwpe0.get(i));
            }
            expect_grads(dwte, dwpe0, dwte0, dwpe0, untouched_table, s, kSumTol, w);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
#endif
}

// GPT-2 shapes with heavy repetition: the deterministic mode gives the same
// bits twice; the atomic mode agrees within float32 summation tolerance.
TEST(EmbeddingCudaTest, DeterministicModeIsBitIdenticalAcrossRuns) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  // GPT-2 124M's batch and width; a vocabulary of 8192 keeps the host-side
  // reference small (the kernels' work does not depend on the vocabulary size).
  const Shape s{8, 1024, 768, 8192, 1024};
  uint32_t seed = 3000;
  for (Types ty : {Types{DType::kF32, DType::kF32}, Types{DType::kBF16, DType::kF32}, Types{DType::kBF16, DType::kBF16}}) {
    for (Ids ids : {Ids::kAllEqual, Ids::kZipf}) {
      const std::string what = std::string(dtype_name(ty.dtype)) + "/" + dtype_name(ty.grad) + " " + ids_name(ids);
      const Buf dout = Buf::random(ty.dtype, s.positions() * s.channels, seed++);
      const auto tok = make_tokens(ids, s.positions(), s.vocab, seed++);
      const Buf dwte0 = Buf::random(ty.grad, s.vocab * s.channels, seed++, -3.0f, 3.0f);
      const Buf dwpe0 = Buf::random(ty.grad, s.max_seq_len * s.channels, seed++, -3.0f, 3.0f);
      BackwardRun first, second;
      run_backward(dwte0, dwpe0, dout, tok, s, ty.dtype, ty.grad, GradMode::kDeterministic, 0, &first, what);
      run_backward(dwte0, dwpe0, dout, tok, s, ty.dtype, ty.grad, GradMode::kDeterministic, 0, &second, what);
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_TRUE(first.dwte.same_bits(second.dwte)) << what;
      EXPECT_TRUE(first.dwpe.same_bits(second.dwpe)) << what;
      const GradRef ref = reference_backward(dwte0, dwpe0, dout, tok, s);
      expect_grads(first.dwte, first.dwpe, dwte0, dwpe0, ref, s, kSumTol, what + " deterministic");
      if (ty.grad == DType::kF32) {
        BackwardRun atomic;
        run_backward(dwte0, dwpe0, dout, tok, s, ty.dtype, ty.grad, GradMode::kAtomic, 0, &atomic, what);
        if (::testing::Test::HasFatalFailure()) return;
        expect_grads(atomic.dwte, atomic.dwpe, dwte0, dwpe0, ref, s, kSumTol, what + " atomic");
        EXPECT_TRUE(atomic.dwpe.same_bits(first.dwpe)) << what << ": dwpe is deterministic in both modes";
      }
    }
  }
#endif
}

TEST(EmbeddingCudaTest, BackwardSkipsInvalidTokensAndFlagsThem) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const Shape s{3, 50, 16, 20, 64};
  const Buf dout = Buf::random(DType::kF32, s.positions() * s.channels, 11);
  std::vector<int32_t> tok = make_tokens(Ids::kZipf, s.positions(), s.vocab, 12);
  const Buf dwte0 = Buf::random(DType::kF32, s.vocab * s.channels, 13);
  const Buf dwpe0 = Buf::random(DType::kF32, s.max_seq_len * s.channels, 14);
  tok[0] = -5;
  tok[37] = 20;
  tok[149] = std::numeric_limits<int32_t>::min();
  const GradRef ref = reference_backward(dwte0, dwpe0, dout, tok, s);  // skips them
  for (GradMode mode : {GradMode::kDeterministic, GradMode::kAtomic}) {
    BackwardRun run;
    run_backward(dwte0, dwpe0, dout, tok, s, DType::kF32, DType::kF32, mode, 0, &run, grad_mode_name(mode));
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(run.flag, 1) << grad_mode_name(mode);
    expect_grads(run.dwte, run.dwpe, dwte0, dwpe0, ref, s, kSumTol, grad_mode_name(mode));
  }
#endif
}

TEST(EmbeddingCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  void* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 1 << 20));
  char* p = static_cast<char*>(d);
  int32_t* tok = reinterpret_cast<int32_t*>(p);
  const DType f32 = DType::kF32, bf16 = DType::kBF16;
  const GradMode det = GradMode::kDeterministic, atomic = GradMode::kAtomic;
  const size_t need = embedding_backward_scratch_bytes(2, 4, 8, det);
  EXPECT_EQ(embedding_forward_cuda(nullptr, nullptr, tok, p, p, 2, 4, 8, 10, 4, f32, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(embedding_forward_cuda(p, nullptr, tok, p, p, 2, 5, 8, 10, 4, f32, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_forward_cuda(p, nullptr, tok, p, p, 2, 4, 8, 10, 4, DType::kF64, nullptr).code(),
            Code::kUnsupported);
  EXPECT_EQ(embedding_forward_cuda(p, nullptr, tok, p, p, int64_t{1} << 20, 2048, 8, 10, 2048, f32, nullptr).code(),
            Code::kInvalidArgument);  // 2^31 positions
  EXPECT_TRUE(embedding_forward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, 8, 10, 4, f32, nullptr).ok());
  EXPECT_EQ(embedding_backward_cuda(p, p, nullptr, p, tok, p, need - 1, 2, 4, 8, 10, 4, f32, f32, det, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(embedding_backward_cuda(p, p, nullptr, p, tok, nullptr, need, 2, 4, 8, 10, 4, f32, f32, det, nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(embedding_backward_cuda(p, p, nullptr, p, tok, p + 8, need, 2, 4, 8, 10, 4, f32, f32, det, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(embedding_backward_cuda(p, p, nullptr, p, tok, nullptr, 0, 2, 4, 8, 10, 4, bf16, bf16, atomic, nullptr)
                .code(),
            Code::kUnsupported);
  EXPECT_EQ(embedding_backward_cuda(p, p, nullptr, p, tok, p, need, 2, 4, 8, 10, 4, bf16, DType::kF16, det, nullptr)
                .code(),
            Code::kUnsupported);
  EXPECT_EQ(embedding_backward_cuda(p, p, nullptr, p, tok, p, need, 2, 4, 8, 10, 4, DType::kF64, DType::kF64, det,
                                    nullptr).code(),
            Code::kUnsupported);
  EXPECT_EQ(embedding_backward_cuda(nullptr, p, nullptr, p, tok, p, need, 2, 4, 8, 10, 4, f32, f32, det, nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(embedding_backward_cuda(p, p, nullptr, p, tok, p, need, 2, 4, 8, 10, 4, f32, f32, static_cast<GradMode>(7),
                                    nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(embedding_backward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 2, 0, 8, 10, 4, f32,
                                      f32, det, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaFree(d));
#endif
}

}  // namespace
}  // namespace colossal::kernels::embedding
