// colossal::kernels::random — the Philox4x32-10 counter-based generator, for
// host and device code alike (__host__ __device__ when compiled by nvcc; a
// plain header otherwise).
//
// Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel Random Numbers: As
// Easy as 1, 2, 3", SC 2011) maps a 128-bit counter and a 64-bit key to 128
// random bits with 10 rounds of two 32x32->64-bit multiplications (constants
// 0xD2511F53, 0xCD9E8D57), a word permutation and a key xor, the key bumped by
// the Weyl constants 0x9E3779B9, 0xBB67AE85 between rounds. Written here from
// the paper; checked against the Random123 known-answer vectors in
// random_test.cc.
//
// colossal's stream for a 64-bit seed: element g (g = 0, 1, 2, ...) of the
// stream is word g % 4 of philox4x32_10(counter = {lo32(g / 4), hi32(g / 4),
// 0, 0}, key = {lo32(seed), hi32(seed)}). A fill with (seed, offset) writes
// stream elements offset, offset + 1, ... (random.h), so the offset unit is
// one element and fills compose: [0, n) in one call equals [0, k) and then
// [k, n) with offset + k, for any k.
//
//   PhiloxBlock bits = philox_stream_block(seed, g / 4);
//   float u = uniform_float(bits.w[g % 4]);   // in [0, 1), 24 random bits
#ifndef COLOSSAL_KERNELS_RANDOM_PHILOX_H_
#define COLOSSAL_KERNELS_RANDOM_PHILOX_H_

#include <cstdint>

#include "kernels/common/host_device.h"

namespace colossal::kernels::random {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // multipliers
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // key bumps (golden ratio, sqrt(3) - 1)
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

// Four 32-bit words: a counter or an output.
struct PhiloxBlock {
  uint32_t w[4];
};

// High 32 bits of the 64-bit product a * b.
COLOSSAL_HOST_DEVICE uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// Philox4x32 with 10 rounds: the bijection of `counter` selected by the key (k0, k1).
COLOSSAL_HOST_DEVICE PhiloxBlock philox4x32_10(PhiloxBlock counter, uint32_t k0, uint32_t k1) {
  uint32_t c0 = counter.w[0], c1 = counter.w[1], c2 = counter.w[2], c3 = counter.w[3];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const uint32_t hi0 = philox_mulhi(kPhiloxM0, c0), lo0 = kPhiloxM0 * c0;
    const uint32_t hi1 = philox_mulhi(kPhiloxM1, c2), lo1 = kPhiloxM1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// Block `block` of the stream for `seed`: stream elements 4 * block .. 4 * block + 3.
COLOSSAL_HOST_DEVICE PhiloxBlock philox_stream_block(uint64_t seed, uint64_t block) {
  const PhiloxBlock counter{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A random word as a float uniform in [0, 1): its top 24 bits times 2^-24
// (exact in float, the same on every device).
COLOSSAL_HOST_DEVICE float uniform_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

}  // namespace colossal::kernels::random

#endif  // COLOSSAL_KERNELS_RANDOM_PHILOX_H_
