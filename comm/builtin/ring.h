// colossal::comm::builtin — collective algorithms over any Transport.
//
// Written once against comm/builtin/transport.h through run_transfers
// (comm/builtin/exchange.h); they never know which transport carries the
// bytes. All buffers are host memory.
//
//   ring_reduce_scatter  P-1 steps around the ring; each rank sends one chunk
//                        to the next rank and reduces the chunk arriving from
//                        the previous one (kernels/reduce) while it arrives.
//   ring_all_gather      P-1 steps; each rank forwards the chunk it got last.
//   ring_all_reduce      reduce-scatter then all-gather, in place: each rank
//                        moves 2(P-1)/P of the buffer, not P-1 copies of it.
//   ring_broadcast       a pipelined chain from the root: every rank forwards
//                        bytes to the next as soon as they arrive.
//   pairwise_all_to_all  P-1 steps; at step s rank r sends to r+s and
//                        receives from r-s.
//   dissemination_barrier  ceil(log2 P) rounds of empty messages.
//
//   Scratch scratch;
//   COLOSSAL_RETURN_IF_ERROR(ring_all_reduce(transport, ctx, scratch, grads, n, DType::kF32,
//                                            ReduceOp::kSum));
//
// Chunks: `count` elements split into P balanced chunks, chunk i being
// [count*i/P, count*(i+1)/P), so any count works (chunks may be empty).
// Floating-point sums are reduced in ring order, not rank order: the result
// equals a serial sum up to rounding (identical on every rank for all_reduce).
#ifndef COLOSSAL_COMM_BUILTIN_RING_H_
#define COLOSSAL_COMM_BUILTIN_RING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "comm/builtin/exchange.h"
#include "comm/builtin/transport.h"
#include "comm/process_group/types.h"
#include "kernels/reduce/reduce.h"

namespace colossal::comm::builtin {

// Reusable host scratch memory (grows, never shrinks).
class Scratch {
 public:
  char* get(size_t bytes);

 private:
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;
};

// a mod p in [0, p) for any sign of a (p > 0): ring neighbours and chunk indices.
inline int ring_mod(int a, int p) { return ((a % p) + p) % p; }

// The reduction kernel's op for `op` (kAvg reduces as kSum; the caller divides).
kernels::reduce::ReduceOp kernel_op(ReduceOp op);

// Element offset where chunk `i` of `count` elements split `parts` ways begins.
int64_t chunk_begin(int64_t count, int parts, int i);

// Bytes a receiver hands to the reduction at a time (a multiple of every
// element size).
inline constexpr size_t kReduceSegmentBytes = size_t{128} << 10;

absl::Status ring_all_reduce(Transport& transport, const OpContext& ctx, Scratch& scratch,
                             void* data, int64_t count, DType dtype, ReduceOp op);

// `input` holds count * P elements, `output` count; output may be input's
// slice of this rank.
absl::Status ring_reduce_scatter(Transport& transport, const OpContext& ctx, Scratch& scratch,
                                 void* output, const void* input, int64_t count, DType dtype,
                                 ReduceOp op);

// `output` holds P * bytes; `input` (bytes) may be output's slice of this rank.
absl::Status ring_all_gather(Transport& transport, const OpContext& ctx, void* output,
                             const void* input, size_t bytes);

absl::Status ring_broadcast(Transport& transport, const OpContext& ctx, void* data, size_t bytes,
                            int root);

// Where an all-to-all's blocks begin: in[i] / out[i] is the byte offset of
// rank i's block of the input / output (P + 1 entries each, the last the total).
struct AllToAllOffsets {
  std::vector<size_t> in, out;
};

// Checks an all-to-all's byte counts on `rank` of P (P of each, laid out back
// to back in rank order; this rank must send itself what it expects to receive
// from itself, else InvalidArgument naming ctx.description) and sets `offsets`.
absl::Status all_to_all_offsets(const OpContext& ctx, int P, int rank,
                                absl::Span<const size_t> output_bytes,
                                absl::Span<const size_t> input_bytes, AllToAllOffsets& offsets);

// Byte counts per rank; blocks are laid out back to back in rank order.
// input_bytes[rank] must equal output_bytes[rank].
absl::Status pairwise_all_to_all(Transport& transport, const OpContext& ctx, void* output,
                                 absl::Span<const size_t> output_bytes, const void* input,
                                 absl::Span<const size_t> input_bytes);

absl::Status dissemination_barrier(Transport& transport, const OpContext& ctx);

// data[i] /= divisor for a float dtype (computed in float for 16-bit types).
absl::Status divide_in_place(void* data, int64_t count, DType dtype, int divisor);

}  // namespace colossal::comm::builtin

#endif  // COLOSSAL_COMM_BUILTIN_RING_H_
