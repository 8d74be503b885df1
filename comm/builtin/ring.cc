#include "comm/builtin/ring.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/check.h"
#include "core/status/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/reduce/reduce.h"

namespace colossal::comm::builtin {
namespace {

namespace kr = kernels::reduce;

// dst[begin, end) op= src[begin, end), byte offsets.
absl::Status reduce_bytes(char* dst, const char* src, size_t begin, size_t end, DType dtype,
                          kr::ReduceOp op) {
  const size_t esz = core::dtype_size(dtype);
  return core::from_kernel_status(
      kr::reduce_into_cpu(dst + begin, src + begin, static_cast<int64_t>((end - begin) / esz),
                          dtype, op),
      "reduction");
}

}  // namespace

char* Scratch::get(size_t bytes) {
  if (bytes > capacity_) {
    buffer_.reset(new char[bytes]);
    capacity_ = bytes;
  }
  return buffer_.get();
}

kr::ReduceOp kernel_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return kr::ReduceOp::kSum;
    case ReduceOp::kProd: return kr::ReduceOp::kProd;
    case ReduceOp::kMax: return kr::ReduceOp::kMax;
    case ReduceOp::kMin: return kr::ReduceOp::kMin;
  }
  COLOSSAL_FATAL() << "unknown ReduceOp " << static_cast<int>(op);
  return kr::ReduceOp::kSum;  // not reached
}

int64_t chunk_begin(int64_t count, int parts, int i) {
  return static_cast<int64_t>(static_cast<__int128>(count) * i / parts);
}

absl::Status divide_in_place(void* data, int64_t count, DType dtype, int divisor) {
  return core::from_kernel_status(
      kernels::dispatch_float_types(dtype,
                                    [&](auto tag) {
                                      using T = decltype(tag);
                                      T* p = static_cast<T*>(data);
                                      for (int64_t i = 0; i < count; ++i) {
                                        p[i] = kernels::from_math<T>(kernels::to_math(p[i]) /
                                                                     divisor);
                                      }
                                      return kernels::KernelStatus();
                                    }),
      "avg");
}

absl::Status ring_all_reduce(Transport& transport, const OpContext& ctx, Scratch& scratch,
                             void* data, int64_t count, DType dtype, ReduceOp op) {
  const int P = transport.size();
  const int r = transport.rank();
  if (P == 1) return absl::OkStatus();
  const size_t esz = core::dtype_size(dtype);
  const kr::ReduceOp kop = kernel_op(op);
  char* base = static_cast<char*>(data);
  const int next = ring_mod(r + 1, P), prev = ring_mod(r - 1, P);
  auto offset = [&](int c) { return static_cast<size_t>(chunk_begin(count, P, c)) * esz; };
  auto length = [&](int c) { return offset(c + 1) - offset(c); };
  size_t max_chunk = 0;
  for (int c = 0; c < P; ++c) max_chunk = std::max(max_chunk, length(c));
  char* tmp = scratch.get(std::max<size_t>(max_chunk, 1));

  // Reduce-scatter: after step s, rank r holds the partial of chunk r-s-1
  // over ranks r-s-1..r; after P-1 steps it owns chunk r+1, fully reduced.
  for (int s = 0; s < P - 1; ++s) {
    const int send_c = ring_mod(r - s, P), recv_c = ring_mod(r - s - 1, P);
    char* dst = base + offset(recv_c);
    Transfer t[2] = {Transfer::send(next, base + offset(send_c), length(send_c)),
                     Transfer::recv(prev, tmp, length(recv_c))};
    t[1].segment = kReduceSegmentBytes;
    t[1].on_data = [&](size_t begin, size_t end) {
      return reduce_bytes(dst, tmp, begin, end, dtype, kop);
    };
    COLOSSAL_RETURN_IF_ERROR(run_transfers(transport, ctx, absl::MakeSpan(t)));
  }
  const int own = ring_mod(r + 1, P);
  if (op == ReduceOp::kAvg) {
    COLOSSAL_RETURN_IF_ERROR(divide_in_place(base + offset(own),
                                             static_cast<int64_t>(length(own) / esz), dtype, P));
  }
  // All-gather: forward the chunk completed last.
  for (int s = 0; s < P - 1; ++s) {
    const int send_c = ring_mod(r + 1 - s, P), recv_c = ring_mod(r - s, P);
    Transfer t[2] = {Transfer::send(next, base + offset(send_c), length(send_c)),
                     Transfer::recv(prev, base + offset(recv_c), length(recv_c))};
    COLOSSAL_RETURN_IF_ERROR(run_transfers(transport, ctx, absl::MakeSpan(t)));
  }
  return absl::OkStatus();
}

absl::Status ring_reduce_scatter(Transport& transport, const OpContext& ctx, Scratch& scratch,
                                 void* output, const void* input, int64_t count, DType dtype,
                                 ReduceOp op) {
  const int P = transport.size();
  const int r = transport.rank();
  const size_t esz = core::dtype_size(dtype);
  const size_t bytes = static_cast<size_t>(count) * esz;
  const char* in = static_cast<const char*>(input);
  if (P == 1) {
    if (output != input) std::memmove(output, input, bytes);
    return absl::OkStatus();
  }
  const kr::ReduceOp kop = kernel_op(op);
  const int next = ring_mod(r + 1, P), prev = ring_mod(r - 1, P);
  // Two partial buffers: one being sent while the other fills.
  char* partial[2];
  partial[0] = scratch.get(std::max<size_t>(2 * bytes, 1));
  partial[1] = partial[0] + bytes;
  for (int s = 0; s < P - 1; ++s) {
    const int send_c = ring_mod(r - s - 1, P), recv_c = ring_mod(r - s - 2, P);
    const char* src = s == 0 ? in + send_c * bytes : partial[(s - 1) % 2];
    char* acc = partial[s % 2];
    const char* local = in + recv_c * bytes;
    Transfer t[2] = {Transfer::send(next, src, bytes), Transfer::recv(prev, acc, bytes)};
    t[1].segment = kReduceSegmentBytes;
    t[1].on_data = [&](size_t begin, size_t end) {
      return reduce_bytes(acc, local, begin, end, dtype, kop);
    };
    COLOSSAL_RETURN_IF_ERROR(run_transfers(transport, ctx, absl::MakeSpan(t)));
  }
  // The last partial is chunk r, reduced over every rank.
  if (bytes > 0) std::memcpy(output, partial[(P - 2) % 2], bytes);
  if (op == ReduceOp::kAvg) {
    COLOSSAL_RETURN_IF_ERROR(divide_in_place(output, count, dtype, P));
  }
  return absl::OkStatus();
}

absl::Status ring_all_gather(Transport& transport, const OpContext& ctx, void* output,
                             const void* input, size_t bytes) {
  const int P = transport.size();
  const int r = transport.rank();
  char* out = static_cast<char*>(output);
  // (Empty buffers may be null: memmove must not see them.)
  if (bytes > 0 && input != out + r * bytes) std::memmove(out + r * bytes, input, bytes);
  const int next = ring_mod(r + 1, P), prev = ring_mod(r - 1, P);
  for (int s = 0; s < P - 1; ++s) {
    const int send_c = ring_mod(r - s, P), recv_c = ring_mod(r - s - 1, P);
    Transfer t[2] = {Transfer::send(next, out + send_c * bytes, bytes),
                     Transfer::recv(prev, out + recv_c * bytes, bytes)};
    COLOSSAL_RETURN_IF_ERROR(run_transfers(transport, ctx, absl::MakeSpan(t)));
  }
  return absl::OkStatus();
}

absl::Status ring_broadcast(Transport& transport, const OpContext& ctx, void* data, size_t bytes,
                            int root) {
  const int P = transport.size();
  const int r = transport.rank();
  if (P == 1) return absl::OkStatus();
  const int pos = ring_mod(r - root, P);
  const int next = ring_mod(r + 1, P), prev = ring_mod(r - 1, P);
  if (pos == 0) {
    Transfer t = Transfer::send(next, data, bytes);
    return run_transfers(transport, ctx, absl::MakeSpan(&t, 1));
  }
  if (pos == P - 1) {
    Transfer t = Transfer::recv(prev, data, bytes);
    return run_transfers(transport, ctx, absl::MakeSpan(&t, 1));
  }
  // Middle of the chain: forward what has arrived so far.
  Transfer t[2] = {Transfer::recv(prev, data, bytes), Transfer::send(next, data, bytes)};
  t[1].send_limit = &t[0].done;
  return run_transfers(transport, ctx, absl::MakeSpan(t));
}

absl::Status all_to_all_offsets(const OpContext& ctx, int P, int rank,
                                absl::Span<const size_t> output_bytes,
                                absl::Span<const size_t> input_bytes, AllToAllOffsets& offsets) {
  COLOSSAL_CHECK_EQ(static_cast<int>(output_bytes.size()), P);
  COLOSSAL_CHECK_EQ(static_cast<int>(input_bytes.size()), P);
  if (input_bytes[rank] != output_bytes[rank]) {
    return absl::InvalidArgumentError(absl::StrCat(
        ctx.description, ": this rank sends itself ", input_bytes[rank],
        " bytes but expects to receive ", output_bytes[rank], " from itself"));
  }
  offsets.in.assign(P + 1, 0);
  offsets.out.assign(P + 1, 0);
  for (int i = 0; i < P; ++i) {
    offsets.in[i + 1] = offsets.in[i] + input_bytes[i];
    offsets.out[i + 1] = offsets.out[i] + output_bytes[i];
  }
  return absl::OkStatus();
}

absl::Status pairwise_all_to_all(Transport& transport, const OpContext& ctx, void* output,
                                 absl::Span<const size_t> output_bytes, const void* input,
                                 absl::Span<const size_t> input_bytes) {
  const int P = transport.size();
  const int r = transport.rank();
  AllToAllOffsets off;
  COLOSSAL_RETURN_IF_ERROR(all_to_all_offsets(ctx, P, r, output_bytes, input_bytes, off));
  char* out = static_cast<char*>(output);
  const char* in = static_cast<const char*>(input);
  if (input_bytes[r] > 0) std::memcpy(out + off.out[r], in + off.in[r], input_bytes[r]);
  for (int s = 1; s < P; ++s) {
    const int to = ring_mod(r + s, P), from = ring_mod(r - s, P);
    Transfer t[2] = {Transfer::send(to, in + off.in[to], input_bytes[to]),
                     Transfer::recv(from, out + off.out[from], output_bytes[from])};
    COLOSSAL_RETURN_IF_ERROR(run_transfers(transport, ctx, absl::MakeSpan(t)));
  }
  return absl::OkStatus();
}

absl::Status dissemination_barrier(Transport& transport, const OpContext& ctx) {
  const int P = transport.size();
  const int r = transport.rank();
  for (int k = 1; k < P; k <<= 1) {
    Transfer t[2] = {Transfer::send(ring_mod(r + k, P), nullptr, 0),
                     Transfer::recv(ring_mod(r - k, P), nullptr, 0)};
    COLOSSAL_RETURN_IF_ERROR(run_transfers(transport, ctx, absl::MakeSpan(t)));
  }
  return absl::OkStatus();
}

}  // namespace colossal::comm::builtin
