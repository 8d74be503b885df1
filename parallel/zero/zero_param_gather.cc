#include "parallel/zero/zero_param_gather.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "parallel/common/grad_buckets.h"

namespace colossal::parallel {

absl::StatusOr<std::shared_ptr<ZeroParamGather>> ZeroParamGather::create(
    std::shared_ptr<comm::ProcessGroup> pg, nn::Module& model, const nn::ParameterStore& store,
    core::DType dtype, const ZeroShard& shard, int64_t piece_elements) {
  if (pg == nullptr) return absl::InvalidArgumentError("zero param gather: no process group");
  if (piece_elements <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("zero param gather: piece_elements must be positive, got ", piece_elements));
  }
  const nn::ParameterTable& table = store.table();
  COLOSSAL_ASSIGN_OR_RETURN(auto owned, module_owned_parameters(model, table));
  std::shared_ptr<ZeroParamGather> g(new ZeroParamGather());
  g->pg_ = std::move(pg);
  g->store_ = store;
  g->dtype_ = dtype;
  g->shard_ = shard;
  g->numel_ = store.flat_values(dtype).numel();
  g->piece_ = piece_elements;
  g->rounds_ = (shard.size + piece_elements - 1) / piece_elements;
  std::weak_ptr<ZeroParamGather> weak = g;
  for (auto& [module, own] : owned) {
    int64_t last = -1;
    for (int i : own) {
      const nn::ParameterEntry& e = table.entries()[i];
      if (e.dtype != dtype || e.numel() == 0) continue;
      // The last element of each rank's slice the parameter reaches into.
      const int64_t a = e.offset, b = e.offset + e.numel();
      for (int r = 0; r < g->pg_->size(); ++r) {
        const int64_t lo = std::max(a, static_cast<int64_t>(r) * shard.size);
        const int64_t hi = std::min(b, static_cast<int64_t>(r + 1) * shard.size);
        if (lo < hi) last = std::max(last, g->round_of(hi - 1));
      }
    }
    if (last < 0) continue;
    module->add_forward_pre_hook([weak, last](nn::Module&, const core::Tensor&) -> absl::Status {
      std::shared_ptr<ZeroParamGather> self = weak.lock();
      if (self == nullptr) return absl::OkStatus();
      return self->wait_through(last);
    });
  }
  return g;
}

void ZeroParamGather::piece(int r, int64_t i, int64_t* begin, int64_t* end) const {
  const int64_t slice_end = std::min(static_cast<int64_t>(r + 1) * shard_.size, numel_);
  *begin = std::min(static_cast<int64_t>(r) * shard_.size + i * piece_, slice_end);
  *end = std::min(*begin + piece_, slice_end);
}

int64_t ZeroParamGather::round_of(int64_t x) const { return (x % shard_.size) / piece_; }

ZeroParamGather::~ZeroParamGather() {
  // The group may cancel unfinished work when destroyed; finish it first.
  settle(core::Stream::cpu()).IgnoreError();
}

absl::Status ZeroParamGather::issue(const core::Stream& stream) {
  if (!works_.empty()) {
    return absl::FailedPreconditionError(
        "zero param gather: the last step's rounds were not settled");
  }
  const core::Tensor values = store_.flat_values(dtype_);
  auto buffer = [&](int64_t begin, int64_t end) -> absl::StatusOr<comm::Buffer> {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor piece, values.slice(begin, end));
    return comm::Buffer::of(piece);
  };
  comm::CollectiveOptions o;
  o.stream = stream;
  const int me = pg_->rank();
  std::vector<comm::P2POp> ops;
  for (int64_t i = 0; i < rounds_; ++i) {
    ops.clear();
    int64_t mine_begin = 0, mine_end = 0;
    piece(me, i, &mine_begin, &mine_end);
    for (int p = 0; p < pg_->size(); ++p) {
      if (p == me) continue;
      int64_t begin = 0, end = 0;
      piece(p, i, &begin, &end);
      if (mine_end > mine_begin) {
        COLOSSAL_ASSIGN_OR_RETURN(comm::Buffer mine, buffer(mine_begin, mine_end));
        ops.push_back({comm::P2POp::Kind::kSend, mine, p});
      }
      if (end > begin) {
        COLOSSAL_ASSIGN_OR_RETURN(comm::Buffer theirs, buffer(begin, end));
        ops.push_back({comm::P2POp::Kind::kRecv, theirs, p});
      }
    }
    if (ops.empty()) {  // (every rank sees the same empty pieces: no peer waits on this one)
      works_.push_back(nullptr);
      continue;
    }
    absl::StatusOr<comm::WorkPtr> w = pg_->batch_send_recv(ops, o);
    if (!w.ok()) {
      // The rounds issued so far still finish before anything reads the weights.
      return core::annotate(w.status(), "low_level_zero: gathering the parameters");
    }
    works_.push_back(*std::move(w));
    ++issued_;
  }
  waited_ = 0;
  return absl::OkStatus();
}

void ZeroParamGather::begin_forward(const core::Stream& compute) { compute_ = compute; }

absl::Status ZeroParamGather::end_forward() {
  absl::Status s = works_.empty() ? absl::OkStatus()
                                  : wait_through(static_cast<int64_t>(works_.size()) - 1);
  compute_.reset();
  return s;
}

absl::Status ZeroParamGather::wait_through(int64_t last) {
  if (works_.empty() || static_cast<int64_t>(waited_) > last) return absl::OkStatus();
  // A forward outside begin_forward / end_forward: the host waits for all.
  if (!compute_.has_value()) return settle(core::Stream::cpu());
  for (; static_cast<int64_t>(waited_) <= last; ++waited_) {
    const comm::WorkPtr& w = works_[waited_];
    if (w == nullptr) continue;
    COLOSSAL_RETURN_IF_ERROR(
        core::annotate(w->wait_on(*compute_), "low_level_zero: gathering the parameters"));
  }
  return absl::OkStatus();
}

absl::Status ZeroParamGather::settle(const core::Stream& on) {
  absl::Status first;
  for (const comm::WorkPtr& w : works_) {
    if (w == nullptr) continue;
    absl::Status s = w->wait_on(on);
    if (first.ok() && !s.ok()) first = s;
  }
  works_.clear();
  waited_ = 0;
  return core::annotate(first, "low_level_zero: gathering the parameters");
}

}  // namespace colossal::parallel
