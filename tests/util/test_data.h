// Random inputs and poisoned outputs for kernel tests.
//
// Tests never run on zeros: inputs are fresh random values from a seeded
// generator, and outputs are filled with a poison pattern first, so an
// element a kernel forgets to write is caught.
#ifndef COLOSSAL_TESTS_UTIL_TEST_DATA_H_
#define COLOSSAL_TESTS_UTIL_TEST_DATA_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace colossal::testing {

// n values uniform in [lo, hi).
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

// Fills `bytes` bytes at `p` with 0xA5: as float32 a large negative number, as
// float16/bfloat16 a finite value no kernel would produce by accident.
// (An empty buffer may have no address: memset must not see a null pointer.)
inline void poison(void* p, size_t bytes) {
  if (bytes > 0) std::memset(p, 0xA5, bytes);
}

}  // namespace colossal::testing

#endif  // COLOSSAL_TESTS_UTIL_TEST_DATA_H_
