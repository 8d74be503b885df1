// colossal::kernels::adam — a float32 master weight kept as two 16-bit halves.
//
// A bfloat16 model trained with float32 masters keeps, per parameter, the
// master (4 bytes) and the model's value (2 bytes), which is the master rounded
// to 16 bits. The value already holds the master's top half, so the master
// needs only 2 more bytes: `lo`, the signed difference of the bit patterns,
//
//   bits(master) = (hi << 16) + lo        (mod 2^32; lo a two's-complement int16)
//
// with hi = bits(master) rounded to its top 16 bits, ties away from zero. The
// pair is the master exactly (a lossless format, not a lower precision), in 4
// bytes instead of 6, and an Adam step reads and writes 8 bytes of it instead
// of reading 4 and writing 4 + 2 (adam_step_split_*, adam.h).
//
// Rounding of hi: nearest, as round-to-nearest-even, except for masters whose
// low 16 bits are exactly 0x8000 (a tie: 1 in 65536 values), which go away
// from zero instead of to even: an even tie would need a 17th bit of lo.
// +-inf, and finite masters that round past the largest bfloat16 (to inf, as
// round-to-nearest-even also does), are kept exactly; a NaN stays a NaN (hi
// quiet), its payload not kept.
#ifndef COLOSSAL_KERNELS_ADAM_SPLIT_MASTER_H_
#define COLOSSAL_KERNELS_ADAM_SPLIT_MASTER_H_

#include <cstdint>

#if defined(__CUDACC__)
#define COLOSSAL_SPLIT_MASTER_FN __host__ __device__ __forceinline__
#else
#define COLOSSAL_SPLIT_MASTER_FN inline
#endif

namespace colossal::kernels::adam {

// The master's bit pattern from its halves.
COLOSSAL_SPLIT_MASTER_FN uint32_t join_master_bits(uint16_t hi, int16_t lo) {
  return (static_cast<uint32_t>(hi) << 16) + static_cast<uint32_t>(static_cast<int32_t>(lo));
}

// The halves of a master's bit pattern (the file comment's rounding).
COLOSSAL_SPLIT_MASTER_FN void split_master_bits(uint32_t bits, uint16_t* hi, int16_t* lo) {
  uint32_t h = (bits + 0x8000u) >> 16;
  // NaN: the sum could carry into the sign (0x7fff8000 + 0x8000) and make a
  // zero; keep the top half, quieted.
  if ((bits & 0x7fffffffu) > 0x7f800000u) h = (bits >> 16) | 0x0040u;
  *hi = static_cast<uint16_t>(h);
  *lo = static_cast<int16_t>(static_cast<uint16_t>(bits - (h << 16)));
}

}  // namespace colossal::kernels::adam

#undef COLOSSAL_SPLIT_MASTER_FN

#endif  // COLOSSAL_KERNELS_ADAM_SPLIT_MASTER_H_
