// kernels/copy: the CPU path against a byte-by-byte reference, and the CUDA
// path against the CPU path byte for byte, on random bytes for widths and
// pitches of every alignment (so every word size runs), with the pitch gaps
// and a guard band after the last row poisoned and checked untouched.
#include "kernels/copy/copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "tests/util/gpu_test.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::copy {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr uint8_t kPoison = 0xA5;

struct Case {
  size_t width, src_pitch, dst_pitch, height, src_offset, dst_offset;
};

// Widths and pitches of 1..16-byte multiples, odd ones, narrow and wide rows.
std::vector<Case> cases() {
  return {{1, 1, 1, 1, 0, 0},         {3, 7, 5, 9, 1, 3},         {16, 32, 16, 100, 0, 0},
          {48, 64, 80, 33, 16, 16},   {512, 2048, 1024, 64, 0, 0}, {512, 2048, 512, 129, 8, 4},
          {2048, 4096, 2048, 257, 0, 0}, {2050, 4100, 2052, 17, 2, 2}, {4, 12, 8, 1000, 4, 0},
          {1 << 16, 1 << 17, 1 << 16, 5, 0, 0}};
}

Bytes random_bytes(size_t n, uint32_t seed) {
  Bytes b(n);
  std::mt19937 rng(seed);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

size_t span(size_t pitch, size_t width, size_t height) { return (height - 1) * pitch + width; }

// What copy_2d must leave in dst: the poisoned buffer with the rows copied.
Bytes expected(const Case& c, const Bytes& src, size_t dst_size) {
  Bytes dst(dst_size, kPoison);
  for (size_t r = 0; r < c.height; ++r) {
    for (size_t b = 0; b < c.width; ++b) {
      dst[c.dst_offset + r * c.dst_pitch + b] = src[c.src_offset + r * c.src_pitch + b];
    }
  }
  return dst;
}

TEST(Copy2dCpu, MatchesReference) {
  uint32_t seed = 1;
  for (const Case& c : cases()) {
    const Bytes src = random_bytes(c.src_offset + span(c.src_pitch, c.width, c.height), seed++);
    const size_t dst_size = c.dst_offset + span(c.dst_pitch, c.width, c.height) + 64;
    Bytes dst(dst_size, kPoison);
    ASSERT_TRUE(copy_2d_cpu(dst.data() + c.dst_offset, c.dst_pitch, src.data() + c.src_offset,
                            c.src_pitch, c.width, c.height)
                    .ok());
    EXPECT_EQ(dst, expected(c, src, dst_size)) << "width " << c.width << " height " << c.height;
  }
}

TEST(Copy2dCpu, RejectsBadArguments) {
  Bytes a(64), b(64);
  EXPECT_FALSE(copy_2d_cpu(a.data(), 8, b.data(), 16, 12, 2).ok());  // dst pitch < width
  EXPECT_FALSE(copy_2d_cpu(nullptr, 16, b.data(), 16, 8, 2).ok());
  EXPECT_TRUE(copy_2d_cpu(nullptr, 0, nullptr, 0, 0, 5).ok());  // nothing to copy
}

TEST(Copy2dCuda, MatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 100;
  for (const Case& c : cases()) {
    const Bytes src = random_bytes(c.src_offset + span(c.src_pitch, c.width, c.height), seed++);
    const size_t dst_size = c.dst_offset + span(c.dst_pitch, c.width, c.height) + 64;
    uint8_t *d_src = nullptr, *d_dst = nullptr;
    ASSERT_EQ(cudaMalloc(&d_src, src.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_dst, dst_size), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_src, src.data(), src.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_dst, kPoison, dst_size), cudaSuccess);
    const KernelStatus s = copy_2d_cuda(d_dst + c.dst_offset, c.dst_pitch, d_src + c.src_offset,
                                        c.src_pitch, c.width, c.height, nullptr);
    ASSERT_TRUE(s.ok()) << s.message();
    Bytes dst(dst_size);
    ASSERT_EQ(cudaMemcpy(dst.data(), d_dst, dst_size, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(dst, expected(c, src, dst_size)) << "width " << c.width << " height " << c.height;
    cudaFree(d_src);
    cudaFree(d_dst);
  }
#endif
}

}  // namespace
}  // namespace colossal::kernels::copy
