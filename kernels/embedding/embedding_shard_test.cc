// kernels/embedding, vocabulary shards (embedding_shard_*): a random token
// table, its rows padded to a multiple of the shard count (as the caller pads
// the vocabulary), split into 1, 2 and 3 equal shards, with ids on every side
// of each shard's rows. On the CPU a shard's forward rows are exact copies or
// exact zeros and the shards' outputs sum to embedding_forward_cpu's (no
// position table); the shards' backwards side by side equal
// embedding_backward_cpu's dwte bit for bit, call after call (the same float64
// sums in the same position order, one rounding). CUDA: the forward equal to
// the CPU's bit for bit, the backward within embedding_test's float32
// summation bound (kSumTol) of the float64 reference in both modes, the
// deterministic mode bit-identical across runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/embedding/embedding.h"
#include "kernels/embedding/embedding_test_util.h"
#include "tests/util/gpu_test.h"
#include "tests/util/host_buffer.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::embedding {
namespace {

using Code = KernelStatus::Code;
using namespace test;  // NOLINT: the shared ids, references and buffers

// n positions of `channels` over a vocabulary of `vocab` ids.
struct Table {
  int64_t n, channels, vocab;
  std::string str() const {
    return "n=" + std::to_string(n) + " C=" + std::to_string(channels) + " V=" + std::to_string(vocab);
  }
};

const Table kTables[] = {{1, 1, 1}, {7, 5, 7}, {51, 24, 50}, {200, 64, 1000}};

// Rows [start, start + rows) of a [*, channels] buffer.
Buf rows_of(const Buf& b, int64_t start, int64_t rows, int64_t channels) {
  Buf r(b.dtype(), rows * channels);
  const size_t es = dtype_size(b.dtype());
  std::memcpy(r.data(), static_cast<const uint8_t*>(b.data()) + start * channels * es, rows * channels * es);
  return r;
}

Buf zeros(DType dtype, int64_t n) {
  Buf z(dtype, n);
  for (int64_t i = 0; i < n; ++i) z.set(i, 0.0);
  return z;
}

// ------------------------------------------------------------------ CPU ----

TEST(EmbeddingShardCpuTest, ShardForwardsSumToWholeTable) {
  uint32_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    for (const Table& tb : kTables) {
      for (int parts : {1, 2, 3}) {
        const std::string what = std::string(dtype_name(dtype)) + " " + tb.str() + " parts=" + std::to_string(parts);
        const int64_t C = tb.channels, rows = (tb.vocab + parts - 1) / parts, padded = rows * parts;
        const Buf wte = Buf::random(dtype, padded * C, seed++);
        const auto tok = make_tokens(Ids::kUniform, tb.n, tb.vocab, seed++);
        Buf whole(dtype, tb.n * C);
        ASSERT_TRUE(embedding_forward_cpu(whole.data(), tok.data(), wte.data(), nullptr, 1, tb.n, C, padded, tb.n,
                                          dtype).ok());
        const Buf zero = zeros(dtype, tb.n * C);
        std::vector<double> sum(tb.n * C, 0.0);
        for (int k = 0; k < parts; ++k) {
          const int64_t start = k * rows;
          const Buf table = rows_of(wte, start, rows, C);
          Buf out(dtype, tb.n * C);  // poisoned
          ASSERT_TRUE(embedding_shard_forward_cpu(out.data(), tok.data(), table.data(), tb.n, C, rows, start,
                                                  dtype).ok()) << what;
          for (int64_t p = 0; p < tb.n; ++p) {
            const bool here = tok[p] >= start && tok[p] < start + rows;
            ASSERT_TRUE(out.same_range(here ? whole : zero, p * C, (p + 1) * C))
                << what << " shard " << k << " position " << p << (here ? " (copy)" : " (zeros)");
          }
          for (int64_t i = 0; i < out.size(); ++i) sum[i] += out.get(i);
        }
        for (int64_t i = 0; i < whole.size(); ++i) ASSERT_EQ(sum[i], whole.get(i)) << what << " i=" << i;
      }
    }
  }
}

TEST(EmbeddingShardCpuTest, ShardBackwardsConcatenateToWholeGradient) {
  uint32_t seed = 100;
  for (Types ty : kCpuGradTypes) {
    for (const Table& tb : kTables) {
      for (Ids ids : {Ids::kUniform, Ids::kAllEqual, Ids::kZipf}) {
        for (int parts : {1, 2, 3}) {
          const std::string what = std::string(dtype_name(ty.dtype)) + "/" + dtype_name(ty.grad) + " " + tb.str() +
                                   " " + ids_name(ids) + " parts=" + std::to_string(parts);
          const int64_t C = tb.channels, rows = (tb.vocab + parts - 1) / parts, padded = rows * parts;
          const Buf dout = Buf::random(ty.dtype, tb.n * C, seed++);
          const auto tok = make_tokens(ids, tb.n, tb.vocab, seed++);
          Buf whole = Buf::random(ty.grad, padded * C, seed++, -3.0f, 3.0f);
          std::vector<Buf> shards;
          for (int k = 0; k < parts; ++k) shards.push_back(rows_of(whole, k * rows, rows, C));
          for (int call = 0; call < 2; ++call) {  // accumulates: the second call adds again
            ASSERT_TRUE(embedding_backward_cpu(whole.data(), nullptr, dout.data(), tok.data(), 1, tb.n, C, padded,
                                               tb.n, ty.dtype, ty.grad).ok());
            for (int k = 0; k < parts; ++k) {
              ASSERT_TRUE(embedding_shard_backward_cpu(shards[k].data(), dout.data(), tok.data(), tb.n, C, rows,
                                                       k * rows, ty.dtype, ty.grad).ok()) << what;
              ASSERT_TRUE(shards[k].same_bits(rows_of(whole, k * rows, rows, C)))
                  << what << " shard " << k << " call " << call;
            }
          }
        }
      }
    }
  }
}

// The rows [10, 15) of a vocabulary: ids below, at both ends, inside, just
// above and far beyond (no shard holds them: zeros and skipped too).
TEST(EmbeddingShardCpuTest, IdsOnEverySideOfTheShard) {
  const int64_t C = 6, start = 10, rows = 5;
  const std::vector<int32_t> tok = {0, 9, 10, 14, 15, 1000000, 12, 10};
  const int64_t n = static_cast<int64_t>(tok.size());
  const DType f32 = DType::kF32;
  const Buf wte = Buf::random(f32, rows * C, 1);
  Buf out(f32, n * C);
  ASSERT_TRUE(embedding_shard_forward_cpu(out.data(), tok.data(), wte.data(), n, C, rows, start, f32).ok());
  for (int64_t p = 0; p < n; ++p) {
    const bool here = tok[p] >= start && tok[p] < start + rows;
    for (int64_t c = 0; c < C; ++c) {
      const double got = out.get(p * C + c);
      ASSERT_EQ(got, here ? wte.get((tok[p] - start) * C + c) : 0.0) << "p=" << p;
      ASSERT_FALSE(std::signbit(got) && !here) << "zeros are +0, p=" << p;
    }
  }
  const Buf dout = Buf::random(f32, n * C, 2);
  const Buf dwte0 = Buf::random(f32, rows * C, 3);
  Buf dwte = dwte0;
  ASSERT_TRUE(embedding_shard_backward_cpu(dwte.data(), dout.data(), tok.data(), n, C, rows, start, f32, f32).ok());
  // Row 0 (id 10) gets positions 2 and 7, row 4 (id 14) position 3, row 2 (id
  // 12) position 6, summed in float64 and rounded once; rows 1 and 3 untouched.
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(dwte.get(c), static_cast<float>(dwte0.get(c) + (dout.get(2 * C + c) + dout.get(7 * C + c))));
    EXPECT_EQ(dwte.get(4 * C + c), static_cast<float>(dwte0.get(4 * C + c) + dout.get(3 * C + c)));
    EXPECT_EQ(dwte.get(2 * C + c), static_cast<float>(dwte0.get(2 * C + c) + dout.get(6 * C + c)));
  }
  EXPECT_TRUE(dwte.same_range(dwte0, 1 * C, 2 * C));
  EXPECT_TRUE(dwte.same_range(dwte0, 3 * C, 4 * C));
}

TEST(EmbeddingShardCpuTest, RejectsNegativeIdsAndBadArguments) {
  const DType f32 = DType::kF32;
  const Buf wte = Buf::random(f32, 4 * 3, 1), dout = Buf::random(f32, 2 * 3, 2);
  for (int32_t bad : {-1, std::numeric_limits<int32_t>::min()}) {
    const int32_t tok[2] = {5, bad};
    Buf out(f32, 2 * 3);
    const Buf out0 = out;
    EXPECT_EQ(embedding_shard_forward_cpu(out.data(), tok, wte.data(), 2, 3, 4, 4, f32).code(), Code::kInvalidArgument);
    EXPECT_TRUE(out.same_bits(out0));
    Buf dwte = wte;
    EXPECT_EQ(embedding_shard_backward_cpu(dwte.data(), dout.data(), tok, 2, 3, 4, 4, f32, f32).code(),
              Code::kInvalidArgument);
    EXPECT_TRUE(dwte.same_bits(wte));
  }
  const int32_t tok[2] = {5, 100};
  Buf out(f32, 2 * 3), dwte = wte;
  EXPECT_TRUE(embedding_shard_forward_cpu(out.data(), tok, wte.data(), 2, 3, 4, 4, f32).ok());
  EXPECT_EQ(embedding_shard_forward_cpu(out.data(), tok, wte.data(), 2, 3, 4, -4, f32).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_shard_forward_cpu(nullptr, tok, wte.data(), 2, 3, 4, 4, f32).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_shard_forward_cpu(out.data(), tok, nullptr, 2, 3, 4, 4, f32).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_shard_forward_cpu(out.data(), tok, wte.data(), 2, 3, 4, 4, DType::kI32).code(),
            Code::kUnsupported);
  EXPECT_TRUE(embedding_shard_forward_cpu(nullptr, nullptr, nullptr, 0, 3, 4, 4, f32).ok());
  EXPECT_EQ(embedding_shard_backward_cpu(dwte.data(), nullptr, tok, 2, 3, 4, 4, f32, f32).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(embedding_shard_backward_cpu(dwte.data(), dout.data(), tok, 2, 3, 4, -1, f32, f32).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(embedding_shard_backward_cpu(dwte.data(), dout.data(), tok, 2, 3, 4, 4, DType::kBF16, DType::kF16).code(),
            Code::kUnsupported);
  EXPECT_TRUE(embedding_shard_backward_cpu(nullptr, nullptr, nullptr, 2, 0, 4, 4, f32, f32).ok());
  for (GradMode mode : {GradMode::kDeterministic, GradMode::kAtomic}) {
    for (int64_t n : {0, 3, 8192}) {
      EXPECT_EQ(embedding_shard_backward_scratch_bytes(n, 768, mode),
                embedding_backward_scratch_bytes(1, n, 768, mode));
    }
  }
}

// ----------------------------------------------------------------- CUDA ----

#if COLOSSAL_WITH_CUDA
constexpr DType kCudaTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// The CUDA calls on guarded device copies placed `offset` elements in.
Buf cuda_forward(const std::vector<int32_t>& tok, const Buf& table, int64_t C, int64_t rows, int64_t start,
                 int64_t offset, const std::string& what) {
  const int64_t n = static_cast<int64_t>(tok.size());
  DeviceBuf d_table(table, offset), d_out(Buf(table.dtype(), n * C), offset);
  DeviceBuf d_tok(tok.data(), sizeof(int32_t), n, 0);
  EXPECT_TRUE(d_table.ok() && d_out.ok() && d_tok.ok()) << what;
  const KernelStatus st = embedding_shard_forward_cuda(d_out.ptr(), d_tok.ptr<int32_t>(), d_table.ptr(), n, C, rows,
                                                       start, table.dtype(), nullptr);
  EXPECT_TRUE(st.ok()) << what << ": " << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
  Buf got(table.dtype(), n * C);
  d_out.fetch(&got, what);
  return got;
}

Buf cuda_backward(const Buf& dwte0, const Buf& dout, const std::vector<int32_t>& tok, int64_t C, int64_t rows,
                  int64_t start, GradMode mode, int64_t offset, const std::string& what) {
  const int64_t n = static_cast<int64_t>(tok.size());
  DeviceBuf d_dwte(dwte0, offset), d_dout(dout, offset), d_tok(tok.data(), sizeof(int32_t), n, 0);
  EXPECT_TRUE(d_dwte.ok() && d_dout.ok() && d_tok.ok()) << what;
  const size_t bytes = embedding_shard_backward_scratch_bytes(n, C, mode);
  void* scratch = nullptr;
  if (bytes > 0) {
    EXPECT_EQ(cudaMalloc(&scratch, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(scratch, 0xA5, bytes), cudaSuccess);
  }
  const KernelStatus st = embedding_shard_backward_cuda(d_dwte.ptr(), d_dout.ptr(), d_tok.ptr<int32_t>(), scratch,
                                                        bytes, n, C, rows, start, dout.dtype(), dwte0.dtype(), mode,
                                                        nullptr);
  EXPECT_TRUE(st.ok()) << what << ": " << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
  EXPECT_EQ(cudaFree(scratch), cudaSuccess);
  Buf got(dwte0.dtype(), dwte0.size());
  d_dwte.fetch(&got, what);
  return got;
}

// The float64 reference of one shard: embedding_test's, over the shard's own
// row ids (another shard's ids fall outside [0, rows) and are skipped).
GradRef shard_reference(const Buf& dwte0, const Buf& dout, const std::vector<int32_t>& tok, int64_t C, int64_t rows,
                        int64_t start, Shape* shape) {
  const int64_t n = static_cast<int64_t>(tok.size());
  *shape = Shape{1, n, C, rows, n};
  std::vector<int32_t> local(tok.size());
  for (size_t p = 0; p < tok.size(); ++p) {
    const int64_t row = static_cast<int64_t>(tok[p]) - start;
    local[p] = row >= 0 && row < rows ? static_cast<int32_t>(row) : -1;
  }
  return reference_backward(dwte0, Buf(dwte0.dtype(), n * C), dout, local, *shape);
}

const Table kCudaTables[] = {{1, 1, 1}, {7, 5, 7}, {51, 24, 50}, {300, 64, 1000}, {5000, 64, 500}, {99, 17, 40}};
#endif

// Negative ids (the CPU rejects them) are treated by CUDA as another shard's:
// the CPU side gets an id beyond every shard in their place.
TEST(EmbeddingShardCudaTest, ForwardMatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 1000;
  for (DType dtype : kCudaTypes) {
    for (const Table& tb : kCudaTables) {
      for (int parts : {2, 3}) {
        for (int64_t offset : {0, 1}) {
          const std::string what = std::string(dtype_name(dtype)) + " " + tb.str() + " parts=" +
                                   std::to_string(parts) + " offset " + std::to_string(offset);
          const int64_t C = tb.channels, rows = (tb.vocab + parts - 1) / parts;
          std::vector<int32_t> tok = make_tokens(Ids::kUniform, tb.n, tb.vocab, seed++);
          std::vector<int32_t> cpu_tok = tok;
          if (tb.n > 1) tok[1] = -7, cpu_tok[1] = static_cast<int32_t>(rows * parts);
          for (int k = 0; k < parts; ++k) {
            const Buf table = Buf::random(dtype, rows * C, seed++);
            Buf want(dtype, tb.n * C);
            ASSERT_TRUE(embedding_shard_forward_cpu(want.data(), cpu_tok.data(), table.data(), tb.n, C, rows, k * rows,
                                                    dtype).ok());
            const Buf got = cuda_forward(tok, table, C, rows, k * rows, offset, what);
            if (::testing::Test::HasFatalFailure()) return;
            ASSERT_TRUE(got.same_bits(want)) << what << " shard " << k;
          }
        }
      }
    }
  }
#endif
}

TEST(EmbeddingShardCudaTest, BackwardMatchesReferenceBothModes) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 2000;
  for (Types ty : kCudaGradTypes) {
    for (const Table& tb : kCudaTables) {
      for (Ids ids : {Ids::kUniform, Ids::kAllEqual, Ids::kZipf}) {
        const int parts = 2 + static_cast<int>(seed % 2);
        const int64_t C = tb.channels, rows = (tb.vocab + parts - 1) / parts;
        std::vector<int32_t> tok = make_tokens(ids, tb.n, tb.vocab, seed++);
        if (tb.n > 2) tok[2] = -3;  // skipped by every shard
        const Buf dout = Buf::random(ty.dtype, tb.n * C, seed++);
        for (int k = 0; k < parts; ++k) {
          const Buf dwte0 = Buf::random(ty.grad, rows * C, seed++, -3.0f, 3.0f);
          Shape shape{};
          const GradRef ref = shard_reference(dwte0, dout, tok, C, rows, k * rows, &shape);
          for (GradMode mode : {GradMode::kDeterministic, GradMode::kAtomic}) {
            if (mode == GradMode::kAtomic && ty.grad != DType::kF32) continue;
            for (int64_t offset : {0, 1}) {
              const std::string what = std::string(dtype_name(ty.dtype)) + "/" + dtype_name(ty.grad) + " " +
                                       tb.str() + " " + ids_name(ids) + " shard " + std::to_string(k) + "/" +
                                       std::to_string(parts) + " " + grad_mode_name(mode) + " offset " +
                                       std::to_string(offset);
              const Buf got = cuda_backward(dwte0, dout, tok, C, rows, k * rows, mode, offset, what);
              if (::testing::Test::HasFatalFailure()) return;
              expect_dwte(got, dwte0, ref, shape, kSumTol, what);
              if (::testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
#endif
}

// GPT-2's batch and width over the upper half of a vocabulary, heavy repetition.
TEST(EmbeddingShardCudaTest, DeterministicModeIsBitIdenticalAcrossRuns) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const int64_t n = 8 * 1024, C = 768, vocab = 8192, rows = vocab / 2, start = rows;
  uint32_t seed = 3000;
  for (DType grad : {DType::kF32, DType::kBF16}) {
    for (Ids ids : {Ids::kAllEqual, Ids::kZipf}) {
      const std::string what = std::string(dtype_name(grad)) + " " + ids_name(ids);
      std::vector<int32_t> tok = make_tokens(ids, n, vocab, seed++);
      if (ids == Ids::kZipf) {  // Zipf favours low ids: mirror them into this shard's half
        for (int32_t& t : tok) t = static_cast<int32_t>(vocab - 1 - t);
      }
      const Buf dout = Buf::random(DType::kBF16, n * C, seed++);
      const Buf dwte0 = Buf::random(grad, rows * C, seed++, -3.0f, 3.0f);
      const Buf a = cuda_backward(dwte0, dout, tok, C, rows, start, GradMode::kDeterministic, 0, what);
      const Buf b = cuda_backward(dwte0, dout, tok, C, rows, start, GradMode::kDeterministic, 0, what);
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_TRUE(a.same_bits(b)) << what;
      Shape shape{};
      const GradRef ref = shard_reference(dwte0, dout, tok, C, rows, start, &shape);
      expect_dwte(a, dwte0, ref, shape, kSumTol, what);
    }
  }
#endif
}

TEST(EmbeddingShardCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  void* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 1 << 20));
  char* p = static_cast<char*>(d);
  const int32_t* tok = reinterpret_cast<const int32_t*>(p);
  const DType f32 = DType::kF32, bf16 = DType::kBF16;
  const GradMode det = GradMode::kDeterministic, atomic = GradMode::kAtomic;
  const size_t need = embedding_shard_backward_scratch_bytes(8, 8, det);
  EXPECT_EQ(embedding_shard_forward_cuda(p, tok, p, 8, 8, 10, -1, f32, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_shard_forward_cuda(nullptr, tok, p, 8, 8, 10, 10, f32, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(embedding_shard_forward_cuda(p, tok, p, 8, 8, 10, 10, DType::kF64, nullptr).code(), Code::kUnsupported);
  EXPECT_EQ(embedding_shard_forward_cuda(p, tok, p, int64_t{1} << 31, 8, 10, 10, f32, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(embedding_shard_forward_cuda(nullptr, nullptr, nullptr, 0, 8, 10, 10, f32, nullptr).ok());
  EXPECT_EQ(embedding_shard_backward_cuda(p, p, tok, p, need - 1, 8, 8, 10, 10, f32, f32, det, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(embedding_shard_backward_cuda(p, p, tok, p, need, 8, 8, 10, -1, f32, f32, det, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(embedding_shard_backward_cuda(p, p, tok, nullptr, 0, 8, 8, 10, 10, bf16, bf16, atomic, nullptr).code(),
            Code::kUnsupported);
  EXPECT_EQ(embedding_shard_backward_cuda(nullptr, p, tok, p, need, 8, 8, 10, 10, f32, f32, det, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(embedding_shard_backward_cuda(nullptr, nullptr, nullptr, nullptr, 0, 0, 8, 10, 10, f32, f32, det,
                                            nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaFree(d));
#endif
}

}  // namespace
}  // namespace colossal::kernels::embedding
