#include "comm/builtin/exchange.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/process_group/process_group.h"
#include "core/status/status.h"

namespace colossal::comm::builtin {
namespace {

constexpr uint32_t kMagic = 0x4c534c43;  // "CLSL"
constexpr size_t kHeaderBytes = 48;

struct Header {
  uint32_t magic;
  uint16_t wire_op;
  uint16_t reserved0;
  uint32_t tag;
  uint32_t reserved1;
  uint64_t seq;
  uint64_t bytes;     // of this message
  uint64_t op_bytes;  // of the operation's buffer (OpContext::op_bytes)
  uint64_t reserved2;
};
static_assert(sizeof(Header) == kHeaderBytes, "wire header is 48 bytes");

uint64_t seq_of(const Transfer& t, const OpContext& ctx) {
  return t.seq == Transfer::kOpSeq ? ctx.seq : t.seq;
}

void encode(const Transfer& t, const OpContext& ctx, unsigned char* out) {
  Header h{};
  h.magic = kMagic;
  h.wire_op = ctx.wire_op;
  h.tag = ctx.tag;
  h.seq = seq_of(t, ctx);
  h.bytes = t.bytes;
  h.op_bytes = ctx.op_bytes;
  std::memcpy(out, &h, sizeof(h));
}

std::string wire_op_name(uint16_t op) {
  if (op == kWireP2P) return "send";
  return op_type_name(static_cast<OpType>(op));
}

std::string message_name(uint16_t op, uint64_t seq, uint32_t tag, uint64_t bytes,
                         uint64_t op_bytes) {
  const std::string what = absl::StrCat(wire_op_name(op), " #", seq, " tag ", tag);
  if (op_bytes == 0 || op_bytes == bytes) return absl::StrCat(what, " with ", bytes, " bytes");
  return absl::StrCat(what, " (a ", op_bytes, "-byte buffer; ", bytes, " bytes in this message)");
}

absl::Status check_header(Transport& transport, const Transfer& t, const OpContext& ctx) {
  Header h;
  std::memcpy(&h, t.header, sizeof(h));
  if (h.magic != kMagic) {
    return absl::DataLossError(absl::StrCat(
        ctx.description, ": garbage from ", transport.describe_peer(t.peer),
        " (bad message header): the stream is out of step or not from colossal"));
  }
  const uint64_t want_seq = seq_of(t, ctx);
  if (h.wire_op != ctx.wire_op || h.seq != want_seq || h.tag != ctx.tag || h.bytes != t.bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        ctx.description, ": ", transport.describe_peer(t.peer), " sent ",
        message_name(h.wire_op, h.seq, h.tag, h.bytes, h.op_bytes), " where ",
        message_name(ctx.wire_op, want_seq, ctx.tag, t.bytes, ctx.op_bytes),
        " was expected: ranks issued different collectives, sizes or tags"));
  }
  return absl::OkStatus();
}

bool is_finished(const Transfer& t) {
  if (t.is_send) return t.header_done == kHeaderBytes && t.done == t.bytes;
  return t.finished();
}

// Progresses one transfer as far as the transport allows. Sets *progressed
// when any byte moved.
absl::Status step(Transport& transport, const OpContext& ctx, Transfer& t, bool* progressed) {
  if (t.is_send) {
    while (t.header_done < kHeaderBytes) {
      COLOSSAL_ASSIGN_OR_RETURN(size_t n, transport.try_send(t.peer, t.header + t.header_done,
                                                             kHeaderBytes - t.header_done));
      if (n == 0) return absl::OkStatus();
      t.header_done += n;
      *progressed = true;
    }
    const size_t limit = t.send_limit ? std::min(t.bytes, *t.send_limit) : t.bytes;
    while (t.done < limit) {
      COLOSSAL_ASSIGN_OR_RETURN(size_t n,
                                transport.try_send(t.peer, t.data + t.done, limit - t.done));
      if (n == 0) return absl::OkStatus();
      t.done += n;
      *progressed = true;
    }
    return absl::OkStatus();
  }
  while (t.header_done < kHeaderBytes) {
    COLOSSAL_ASSIGN_OR_RETURN(size_t n, transport.try_recv(t.peer, t.header + t.header_done,
                                                           kHeaderBytes - t.header_done));
    if (n == 0) return absl::OkStatus();
    t.header_done += n;
    *progressed = true;
  }
  if (!t.header_checked) {
    COLOSSAL_RETURN_IF_ERROR(check_header(transport, t, ctx));
    t.header_checked = true;
  }
  while (t.done < t.bytes) {
    COLOSSAL_ASSIGN_OR_RETURN(size_t n,
                              transport.try_recv(t.peer, t.data + t.done, t.bytes - t.done));
    if (n == 0) break;
    t.done += n;
    *progressed = true;
  }
  // Hand completed segments (and the tail) to the consumer.
  if (t.delivered < t.done) {
    size_t end = t.done;
    if (t.done < t.bytes) {
      if (t.segment == 0) return absl::OkStatus();
      end = t.delivered + (t.done - t.delivered) / t.segment * t.segment;
    }
    if (end > t.delivered) {
      if (t.on_data) COLOSSAL_RETURN_IF_ERROR(t.on_data(t.delivered, end));
      t.delivered = end;
    }
  }
  return absl::OkStatus();
}

std::string describe_pending(Transport& transport, absl::Span<const Transfer> transfers) {
  std::vector<std::string> parts;
  for (const Transfer& t : transfers) {
    if (is_finished(t)) continue;
    if (t.is_send) {
      parts.push_back(absl::StrCat("sending to ", transport.describe_peer(t.peer), ": ", t.done,
                                   " of ", t.bytes, " bytes sent",
                                   t.header_done < kHeaderBytes ? " (peer not receiving)" : ""));
    } else {
      parts.push_back(absl::StrCat("receiving from ", transport.describe_peer(t.peer), ": ",
                                   t.done, " of ", t.bytes, " bytes received",
                                   t.header_done == 0 ? " (nothing arrived: has it started?)" : ""));
    }
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace

absl::Status run_transfers(Transport& transport, const OpContext& ctx,
                           absl::Span<Transfer> transfers) {
  const int size = transport.size();
  // busy[2 * peer + is_send]: an earlier transfer of that stream is unfinished.
  std::vector<uint8_t> busy(2 * static_cast<size_t>(size), 0);
  std::vector<Interest> interests;
  for (Transfer& t : transfers) {
    if (t.is_send) encode(t, ctx, t.header);
  }
  for (;;) {
    const uint64_t token = transport.progress_token();
    bool progressed = false;
    bool all_done = true;
    interests.clear();
    for (Transfer& t : transfers) {
      if (is_finished(t)) continue;
      const size_t slot = 2 * static_cast<size_t>(t.peer) + (t.is_send ? 1 : 0);
      if (busy[slot]) {
        all_done = false;
        continue;
      }
      busy[slot] = 1;
      absl::Status s = step(transport, ctx, t, &progressed);
      if (!s.ok()) {
        if (absl::IsUnavailable(s)) return core::annotate(s, ctx.description);
        return s;
      }
      if (!is_finished(t)) {
        all_done = false;
        interests.push_back({t.peer, t.is_send});
      }
    }
    std::fill(busy.begin(), busy.end(), 0);
    if (all_done) return absl::OkStatus();
    if (ctx.abort != nullptr && ctx.abort->load(std::memory_order_acquire)) {
      return absl::CancelledError(
          absl::StrCat(ctx.description, ": cancelled (the process group is shutting down)"));
    }
    if (progressed) continue;
    if (absl::Now() >= ctx.deadline) {
      return absl::DeadlineExceededError(absl::StrCat(ctx.description, ": timed out after ",
                                                      absl::FormatDuration(ctx.timeout), "; ",
                                                      describe_pending(transport, transfers)));
    }
    absl::Status s = transport.wait(interests, token, ctx.deadline);
    if (!s.ok()) return core::annotate(s, ctx.description);
  }
}

}  // namespace colossal::comm::builtin
