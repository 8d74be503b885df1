// Serial references for collective tests.
//
// Inputs are deterministic per (seed, rank, element): floats uniform in
// [-1, 1), integers in [-100, 100] (so sums and products stay meaningful).
//
// How results are compared (the tests' stated tolerance):
//   * max, min, and every op on integer dtypes: bitwise equal to the serial
//     reduction in rank order (these are exact and order-independent).
//   * sum, avg and prod on float dtypes: the ring adds in a different order
//     than a serial loop, and 16-bit types round after each partial step, so
//     |got - ref| <= 2 * P * eps * (sum_i |x_i|) / d + eps * |ref|, with ref
//     computed in double, d the avg divisor (1 otherwise) and eps the dtype's
//     unit roundoff times 2 (2^-23 float32, 2^-7 bfloat16, 2^-10 float16,
//     2^-52 float64); for prod sum_i |x_i| is replaced by |ref| * P.
//   * all_gather, all_to_all, broadcast, send/recv: bytes equal.
#ifndef COLOSSAL_COMM_TESTING_REFERENCE_H_
#define COLOSSAL_COMM_TESTING_REFERENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_group/types.h"

namespace colossal::comm::testing {

// `count` elements of `dtype` as bytes.
std::vector<uint8_t> make_input(DType dtype, int64_t count, int rank, uint32_t seed);

// Empty when `got` (count elements) matches op over inputs[0..P) at element
// range [offset, offset + count); otherwise a description of the first bad element.
std::string check_reduction(DType dtype, ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
                            int64_t offset, const void* got, int64_t count);

// Empty when the bytes are equal; otherwise the first differing element.
std::string check_bytes(DType dtype, const void* got, const void* want, int64_t count);

}  // namespace colossal::comm::testing

#endif  // COLOSSAL_COMM_TESTING_REFERENCE_H_
