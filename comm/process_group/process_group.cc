#include "comm/process_group/process_group.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status/check.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"

namespace colossal::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "unknown";
}

const char* op_type_name(OpType type) {
  switch (type) {
    case OpType::kAllReduce: return "all_reduce";
    case OpType::kReduceScatter: return "reduce_scatter";
    case OpType::kAllGather: return "all_gather";
    case OpType::kAllToAll: return "all_to_all";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kSend: return "send";
    case OpType::kRecv: return "recv";
    case OpType::kBatchSendRecv: return "batch_send_recv";
    case OpType::kBarrier: return "barrier";
    case OpType::kReduce: return "reduce";
  }
  return "unknown";
}

absl::StatusOr<Buffer> Buffer::of(const core::Tensor& tensor) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError("collective on an undefined tensor");
  }
  return Buffer{tensor.raw_data(), tensor.numel(), tensor.dtype(), tensor.device()};
}

std::string Buffer::to_string() const {
  return absl::StrCat(core::dtype_name(dtype), " x ", count, " on ", device.to_string());
}

namespace {

bool overlaps(const Buffer& a, const Buffer& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0 || a.device != b.device) return false;
  const char* pa = static_cast<const char*>(a.data);
  const char* pb = static_cast<const char*>(b.data);
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

absl::Status check_counts(const char* side, absl::Span<const int64_t> counts, int size,
                          int64_t total) {
  if (static_cast<int>(counts.size()) != size) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all: ", counts.size(), " ", side,
                                                   " counts for a group of ", size, " ranks"));
  }
  int64_t sum = 0;
  for (int i = 0; i < size; ++i) {
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("all_to_all: ", side, " count for rank ", i, " is negative (", counts[i], ")"));
    }
    sum += counts[i];
  }
  if (sum != total) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all: ", side, " counts sum to ", sum,
                                                   " but the ", side, " buffer holds ", total,
                                                   " elements"));
  }
  return absl::OkStatus();
}

}  // namespace

ProcessGroup::ProcessGroup(int rank, int size, std::vector<int> world_ranks,
                           absl::Duration timeout)
    : rank_(rank), size_(size), world_ranks_(std::move(world_ranks)), timeout_(timeout) {
  COLOSSAL_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_) << "rank " << rank_ << " of " << size_;
  COLOSSAL_CHECK_EQ(static_cast<int>(world_ranks_.size()), size_);
}

namespace {

// A collective that is the identity (a group of one rank): complete at once;
// waiting for it waits for the input stream's work issued before it.
class IdentityWork : public Work {
 public:
  IdentityWork(std::string description, std::optional<core::Event> issued)
      : Work(std::move(description)), issued_(std::move(issued)) {
    complete(absl::OkStatus());
  }
  bool is_completed() override { return !issued_.has_value() || issued_->query(); }
  absl::Status wait(absl::Duration timeout) override {
    if (issued_.has_value()) issued_->synchronize();
    return Work::wait(timeout);
  }
  void wait_stream(const core::Stream& stream) override {
    if (issued_.has_value()) issued_->wait(stream);
  }

 private:
  std::optional<core::Event> issued_;
};

}  // namespace

ProcessGroup::~ProcessGroup() = default;

absl::StatusOr<bool> collective_check_from_env() {
  const char* v = std::getenv("COLOSSAL_CHECK_COLLECTIVES");
  if (v == nullptr || std::string(v).empty() || std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  return absl::InvalidArgumentError(absl::StrCat(
      "COLOSSAL_CHECK_COLLECTIVES=\"", v, "\": want 1 (check that every rank issues the same "
      "collectives) or 0"));
}

absl::StatusOr<std::optional<absl::Duration>> timeout_from_env() {
  const char* v = std::getenv("COLOSSAL_TIMEOUT");
  if (v == nullptr || std::string(v).empty()) return std::nullopt;
  double seconds = 0;
  constexpr double kWeek = 7 * 24 * 3600.0;
  if (!absl::SimpleAtod(v, &seconds) || !(seconds > 0) || seconds > kWeek) {
    return absl::InvalidArgumentError(absl::StrCat(
        "COLOSSAL_TIMEOUT=\"", v, "\": want the seconds a collective or a wait for the other "
        "ranks may take, a positive number up to a week (", kWeek, ")"));
  }
  return absl::Seconds(seconds);
}

void ProcessGroup::check_collectives_through(std::shared_ptr<Store> store,
                                             const std::string& group_name) {
  const absl::StatusOr<bool> on = collective_check_from_env();
  if (!on.ok() || !*on || size_ == 1) return;
  check_store_ = std::move(store);
  check_prefix_ = absl::StrCat("colossal/check_collectives/", group_name, "/");
}

namespace {

// `detail` without its buffers' devices (" on cuda:1"): ranks of one
// collective name their own device.
std::string without_devices(std::string detail) {
  size_t at;
  while ((at = detail.find(" on ")) != std::string::npos) {
    const size_t end = detail.find_first_of(" ,;)", at + 4);  // devices name no spaces
    detail.erase(at, end == std::string::npos ? std::string::npos : end - at);
  }
  return detail;
}

}  // namespace

absl::Status ProcessGroup::check_same_collective(const OpInfo& info, const std::string& what) {
  const std::string which = absl::StrCat("COLOSSAL_CHECK_COLLECTIVES: collective ", checked_,
                                         " of this group (", info.description, ")");
  absl::StatusOr<ExchangeRound> round =
      exchange_round(*check_store_, check_prefix_, checked_++, rank_, size_, what, info.timeout);
  if (!round.ok()) return core::annotate(round.status(), which);
  if (!round->missing.empty()) {
    std::vector<int> missing;
    for (int r : round->missing) missing.push_back(world_ranks_[r]);
    return absl::DeadlineExceededError(absl::StrCat(
        which, ": world rank(s) ", absl::StrJoin(missing, ", "), " did not issue it within ",
        absl::FormatDuration(info.timeout), " (they skipped it, or wait elsewhere)"));
  }
  std::vector<std::string> theirs;
  bool same = true;
  for (int r = 0; r < size_; ++r) {
    same = same && round->values[r] == what;
    theirs.push_back(absl::StrCat("world rank ", world_ranks_[r], ": ", round->values[r]));
  }
  if (same) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      which, ": the ranks issue different collectives; ", absl::StrJoin(theirs, "; ")));
}

absl::StatusOr<OpInfo> ProcessGroup::next_op(OpType type, const CollectiveOptions& options,
                                             std::string detail, size_t bytes) {
  OpInfo info;
  info.type = type;
  info.seq = next_seq_++;
  info.tag = options.tag;
  info.timeout = options.timeout > absl::ZeroDuration() ? options.timeout : timeout_;
  info.stream = options.stream;
  info.bytes = bytes;
  const std::string tag = options.tag != 0 ? absl::StrCat(" tag ", options.tag) : "";
  info.description = absl::StrCat(op_type_name(type), " #", info.seq, tag,
                                   detail.empty() ? "" : " (", detail, detail.empty() ? "" : ")");
  const bool p2p = type == OpType::kSend || type == OpType::kRecv || type == OpType::kBatchSendRecv;
  if (check_store_ != nullptr && !p2p) {
    COLOSSAL_RETURN_IF_ERROR(check_same_collective(
        info, absl::StrCat(op_type_name(type), tag, detail.empty() ? "" : " (",
                           without_devices(detail), detail.empty() ? "" : ")")));
  }
  return info;
}

absl::Status ProcessGroup::check_buffer(const char* what, const Buffer& buffer,
                                        const char* op) const {
  if (buffer.count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " has a negative count (", buffer.count, ")"));
  }
  if (buffer.count > 0 && buffer.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " is null with ", buffer.count, " elements"));
  }
  return core::annotate(check_device(buffer.device), absl::StrCat(op, ": ", what));
}

absl::Status ProcessGroup::check_reduction(const char* op_name, const Buffer& buffer,
                                           ReduceOp op) const {
  COLOSSAL_RETURN_IF_ERROR(check_buffer("buffer", buffer, op_name));
  if (op == ReduceOp::kAvg && !core::dtype_is_floating(buffer.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_name, ": avg needs a floating-point dtype, not ", core::dtype_name(buffer.dtype),
        " (reduce with sum and divide)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkPtr> ProcessGroup::alone(const OpInfo& info, const Buffer& buffer) const {
  // Host buffers need nothing; device buffers on a given input stream get a
  // Work that still orders what waits for it after that stream's work so far.
  if (size_ == 1 && buffer.device.is_cpu()) {
    return WorkPtr(std::make_shared<IdentityWork>(info.description, std::nullopt));
  }
  if (size_ == 1 && info.stream.has_value() && info.stream->is_cuda() &&
      info.stream->device() == buffer.device) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Event issued, core::Event::create(buffer.device));
    issued.record(*info.stream);
    return WorkPtr(std::make_shared<IdentityWork>(info.description, std::move(issued)));
  }
  return WorkPtr();
}

absl::StatusOr<WorkPtr> ProcessGroup::all_reduce(const Buffer& buffer, ReduceOp op,
                                                 const CollectiveOptions& options) {
  COLOSSAL_RETURN_IF_ERROR(check_reduction("all_reduce", buffer, op));
  std::lock_guard<std::mutex> lock(issue_mu_);
  COLOSSAL_ASSIGN_OR_RETURN(
      OpInfo info,
      next_op(OpType::kAllReduce, options,
              absl::StrCat(reduce_op_name(op), ", ", buffer.to_string()), buffer.nbytes()));
  COLOSSAL_ASSIGN_OR_RETURN(WorkPtr done, alone(info, buffer));
  if (done != nullptr) return done;
  return do_all_reduce(std::move(info), buffer, op);
}

absl::StatusOr<WorkPtr> ProcessGroup::reduce(const Buffer& buffer, ReduceOp op, int root,
                                             const CollectiveOptions& options) {
  COLOSSAL_RETURN_IF_ERROR(check_reduction("reduce", buffer, op));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce: root ", root, " is not a rank of this group of ", size_));
  }
  std::lock_guard<std::mutex> lock(issue_mu_);
  COLOSSAL_ASSIGN_OR_RETURN(
      OpInfo info,
      next_op(OpType::kReduce, options,
              absl::StrCat(reduce_op_name(op), " to root ", root, ", ", buffer.to_string()),
              buffer.nbytes()));
  COLOSSAL_ASSIGN_OR_RETURN(WorkPtr done, alone(info, buffer));
  if (done != nullptr) return done;
  return do_reduce(std::move(info), buffer, op, root);
}

absl::StatusOr<WorkPtr> ProcessGroup::reduce_scatter(const Buffer& output, const Buffer& input,
                                                     ReduceOp op,
                                                     const CollectiveOptions& options) {
  COLOSSAL_RETURN_IF_ERROR(check_buffer("output", output, "reduce_scatter"));
  COLOSSAL_RETURN_IF_ERROR(check_buffer("input", input, "reduce_scatter"));
  if (input.dtype != output.dtype || input.device != output.device) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: input (", input.to_string(),
                                                   ") and output (", output.to_string(),
                                                   ") differ in dtype or device"));
  }
  if (input.count != output.count * size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce_scatter: input has ", input.count, " elements; a group of ", size_,
        " ranks with ", output.count, " output elements needs ", output.count * size_));
  }
  if (op == ReduceOp::kAvg && !core::dtype_is_floating(input.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce_scatter: avg needs a floating-point dtype, not ", core::dtype_name(input.dtype)));
  }
  const bool in_place =
      output.data == static_cast<char*>(input.data) + static_cast<size_t>(rank_) * output.nbytes();
  if (!in_place && overlaps(input, output)) {
    return absl::InvalidArgumentError(
        "reduce_scatter: output overlaps input other than at this rank's slice (in place)");
  }
  std::lock_guard<std::mutex> lock(issue_mu_);
  COLOSSAL_ASSIGN_OR_RETURN(
      OpInfo info,
      next_op(OpType::kReduceScatter, options,
              absl::StrCat(reduce_op_name(op), ", ", input.to_string()), input.nbytes()));
  return do_reduce_scatter(std::move(info), output, input, op);
}

absl::StatusOr<WorkPtr> ProcessGroup::all_gather(const Buffer& output, const Buffer& input,
                                                 const CollectiveOptions& options) {
  COLOSSAL_RETURN_IF_ERROR(check_buffer("output", output, "all_gather"));
  COLOSSAL_RETURN_IF_ERROR(check_buffer("input", input, "all_gather"));
  if (input.dtype != output.dtype || input.device != output.device) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather: input (", input.to_string(),
                                                   ") and output (", output.to_string(),
                                                   ") differ in dtype or device"));
  }
  if (output.count != input.count * size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all_gather: output has ", output.count, " elements; a group of ", size_,
        " ranks with ", input.count, " input elements needs ", input.count * size_));
  }
  const bool in_place =
      input.data == static_cast<char*>(output.data) + static_cast<size_t>(rank_) * input.nbytes();
  if (!in_place && overlaps(input, output)) {
    return absl::InvalidArgumentError(
        "all_gather: input overlaps output other than as this rank's slice (in place)");
  }
  std::lock_guard<std::mutex> lock(issue_mu_);
  COLOSSAL_ASSIGN_OR_RETURN(
      OpInfo info, next_op(OpType::kAllGather, options, output.to_string(), output.nbytes()));
  return do_all_gather(std::move(info), output, input);
}

absl::StatusOr<WorkPtr> ProcessGroup::all_to_all(const Buffer& output, const Buffer& input,
                                                 const CollectiveOptions& options) {
  if (input.count % size_ != 0 || output.count % size_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all_to_all: equal splits need counts divisible by the group size ", size_, " (input ",
        input.count, ", output ", output.count, "); pass per-rank counts instead"));
  }
  std::vector<int64_t> in_counts(size_, input.count / size_);
  std::vector<int64_t> out_counts(size_, output.count / size_);
  return all_to_all(output, out_counts, input, in_counts, options);
}

absl::StatusOr<WorkPtr> ProcessGroup::all_to_all(const Buffer& output,
                                                 absl::Span<const int64_t> output_counts,
                                                 const Buffer& input,
                                                 absl::Span<const int64_t> input_counts,
                                                 const CollectiveOptions& options) {
  COLOSSAL_RETURN_IF_ERROR(check_buffer("output", output, "all_to_all"));
  COLOSSAL_RETURN_IF_ERROR(check_buffer("input", input, "all_to_all"));
  if (input.dtype != output.dtype || input.device != output.device) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all: input (", input.to_string(),
                                                   ") and output (", output.to_string(),
                                                   ") differ in dtype or device"));
  }
  COLOSSAL_RETURN_IF_ERROR(check_counts("output", output_counts, size_, output.count));
  COLOSSAL_RETURN_IF_ERROR(check_counts("input", input_counts, size_, input.count));
  if (overlaps(input, output)) {
    return absl::InvalidArgumentError("all_to_all: input and output overlap");
  }
  std::lock_guard<std::mutex> lock(issue_mu_);
  COLOSSAL_ASSIGN_OR_RETURN(
      OpInfo info,
      next_op(OpType::kAllToAll, options,
              absl::StrCat(input.to_string(), " -> ", output.count, " elements"), input.nbytes()));
  return do_all_to_all(
      std::move(info), output, std::vector<int64_t>(output_counts.begin(), output_counts.end()),
      input, std::vector<int64_t>(input_counts.begin(), input_counts.end()));
}

absl::StatusOr<WorkPtr> ProcessGroup::broadcast(const Buffer& buffer, int root,
                                                const CollectiveOptions& options) {
  COLOSSAL_RETURN_IF_ERROR(check_buffer("buffer", buffer, "broadcast"));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast: root ", root, " is not a rank of this group of ", size_));
  }
  std::lock_guard<std::mutex> lock(issue_mu_);
  COLOSSAL_ASSIGN_OR_RETURN(
      OpInfo info, next_op(OpType::kBroadcast, options,
                           absl::StrCat("root ", root, ", ", buffer.to_string()), buffer.nbytes()));
  return do_broadcast(std::move(info), buffer, root);
}

absl::StatusOr<WorkPtr> ProcessGroup::send(const Buffer& buffer, int peer,
                                           const CollectiveOptions& options) {
  const P2POp op{P2POp::Kind::kSend, buffer, peer};
  return batch_send_recv(absl::MakeConstSpan(&op, 1), options);
}

absl::StatusOr<WorkPtr> ProcessGroup::recv(const Buffer& buffer, int peer,
                                           const CollectiveOptions& options) {
  const P2POp op{P2POp::Kind::kRecv, buffer, peer};
  return batch_send_recv(absl::MakeConstSpan(&op, 1), options);
}

absl::StatusOr<WorkPtr> ProcessGroup::batch_send_recv(absl::Span<const P2POp> ops,
                                                      const CollectiveOptions& options) {
  if (ops.empty()) return absl::InvalidArgumentError("batch_send_recv: no operations");
  std::vector<std::string> parts;
  size_t bytes = 0;
  for (const P2POp& op : ops) {
    const char* name = op.kind == P2POp::Kind::kSend ? "send" : "recv";
    COLOSSAL_RETURN_IF_ERROR(check_buffer("buffer", op.buffer, name));
    if (op.peer < 0 || op.peer >= size_ || op.peer == rank_) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": peer ", op.peer, op.peer == rank_ ? " is this rank" : " is not a rank",
          " of this group of ", size_));
    }
    if (op.buffer.device != ops[0].buffer.device) {
      return absl::InvalidArgumentError("batch_send_recv: buffers on different devices");
    }
    parts.push_back(absl::StrCat(name, op.kind == P2POp::Kind::kSend ? " to " : " from ", "rank ",
                                 op.peer, ": ", op.buffer.to_string()));
    bytes += op.buffer.nbytes();
  }
  const OpType type = ops.size() > 1 ? OpType::kBatchSendRecv
                      : ops[0].kind == P2POp::Kind::kSend ? OpType::kSend
                                                          : OpType::kRecv;
  std::lock_guard<std::mutex> lock(issue_mu_);
  COLOSSAL_ASSIGN_OR_RETURN(OpInfo info, next_op(type, options, absl::StrJoin(parts, "; "), bytes));
  return do_batch_send_recv(std::move(info), std::vector<P2POp>(ops.begin(), ops.end()));
}

absl::StatusOr<WorkPtr> ProcessGroup::barrier(const CollectiveOptions& options) {
  std::lock_guard<std::mutex> lock(issue_mu_);
  COLOSSAL_ASSIGN_OR_RETURN(OpInfo info, next_op(OpType::kBarrier, options, "", 0));
  return do_barrier(std::move(info));
}

// Tensor overloads.
absl::StatusOr<WorkPtr> ProcessGroup::all_reduce(const core::Tensor& tensor, ReduceOp op,
                                                 const CollectiveOptions& options) {
  COLOSSAL_ASSIGN_OR_RETURN(Buffer b, Buffer::of(tensor));
  return all_reduce(b, op, options);
}
absl::StatusOr<WorkPtr> ProcessGroup::reduce_scatter(const core::Tensor& output,
                                                     const core::Tensor& input, ReduceOp op,
                                                     const CollectiveOptions& options) {
  COLOSSAL_ASSIGN_OR_RETURN(Buffer out, Buffer::of(output));
  COLOSSAL_ASSIGN_OR_RETURN(Buffer in, Buffer::of(input));
  return reduce_scatter(out, in, op, options);
}
absl::StatusOr<WorkPtr> ProcessGroup::all_gather(const core::Tensor& output,
                                                 const core::Tensor& input,
                                                 const CollectiveOptions& options) {
  COLOSSAL_ASSIGN_OR_RETURN(Buffer out, Buffer::of(output));
  COLOSSAL_ASSIGN_OR_RETURN(Buffer in, Buffer::of(input));
  return all_gather(out, in, options);
}
absl::StatusOr<WorkPtr> ProcessGroup::all_to_all(const core::Tensor& output,
                                                 const core::Tensor& input,
                                                 const CollectiveOptions& options) {
  COLOSSAL_ASSIGN_OR_RETURN(Buffer out, Buffer::of(output));
  COLOSSAL_ASSIGN_OR_RETURN(Buffer in, Buffer::of(input));
  return all_to_all(out, in, options);
}
absl::StatusOr<WorkPtr> ProcessGroup::broadcast(const core::Tensor& tensor, int root,
                                                const CollectiveOptions& options) {
  COLOSSAL_ASSIGN_OR_RETURN(Buffer b, Buffer::of(tensor));
  return broadcast(b, root, options);
}

absl::StatusOr<WorkPtr> ProcessGroup::reduce(const core::Tensor& tensor, ReduceOp op, int root,
                                             const CollectiveOptions& options) {
  COLOSSAL_ASSIGN_OR_RETURN(Buffer b, Buffer::of(tensor));
  return reduce(b, op, root, options);
}
absl::StatusOr<WorkPtr> ProcessGroup::send(const core::Tensor& tensor, int peer,
                                           const CollectiveOptions& options) {
  COLOSSAL_ASSIGN_OR_RETURN(Buffer b, Buffer::of(tensor));
  return send(b, peer, options);
}
absl::StatusOr<WorkPtr> ProcessGroup::recv(const core::Tensor& tensor, int peer,
                                           const CollectiveOptions& options) {
  COLOSSAL_ASSIGN_OR_RETURN(Buffer b, Buffer::of(tensor));
  return recv(b, peer, options);
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> ProcessGroup::new_group(absl::Span<const int> ranks) {
  if (ranks.empty()) return absl::InvalidArgumentError("new_group: empty rank list");
  std::set<int> seen;
  int group_rank = -1;
  std::vector<int> world;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("new_group: rank ", r,
                                                     " is not a rank of this group of ", size_));
    }
    if (!seen.insert(r).second) {
      return absl::InvalidArgumentError(absl::StrCat("new_group: rank ", r, " is listed twice"));
    }
    if (r == rank_) group_rank = static_cast<int>(i);
    world.push_back(world_ranks_[r]);
  }
  if (group_rank < 0) return std::shared_ptr<ProcessGroup>();
  std::vector<int> key(ranks.begin(), ranks.end());
  int instance;
  {
    std::lock_guard<std::mutex> lock(issue_mu_);
    instance = subgroups_created_[key]++;
  }
  const std::string name =
      absl::StrCat("subgroup/", absl::StrJoin(ranks, ","), "/", instance);
  auto group = do_new_group(name, std::move(world), group_rank);
  if (!group.ok()) {
    return core::annotate(group.status(), absl::StrCat("new_group(", absl::StrJoin(ranks, ","), ")"));
  }
  return group;
}

}  // namespace colossal::comm
