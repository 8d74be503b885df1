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
  const int64_t numel = store.flat_values(dtype).numel();
  for (int r = 0; r < g->pg_->size(); ++r) {
    const int64_t end = std::min(static_cast<int64_t>(r + 1) * shard.size, numel);
    for (int64_t a = static_cast<int64_t>(r) * shard.size; a < end; a += piece_elements) {
      g->pieces_.push_back({a, std::min(a + piece_elements, end), r});
    }
  }
  // The piece holding flat element i (pieces tile [0, numel) in order).
  auto piece_of = [&](int64_t i) {
    auto it = std::upper_bound(g->pieces_.begin(), g->pieces_.end(), i,
                               [](int64_t v, const Piece& p) { return v < p.begin; });
    return static_cast<int64_t>(it - g->pieces_.begin()) - 1;
  };
  std::weak_ptr<ZeroParamGather> weak = g;
  for (auto& [module, own] : owned) {
    int64_t last = -1;
    for (int i : own) {
      const nn::ParameterEntry& e = table.entries()[i];
      if (e.dtype != dtype || e.numel() == 0) continue;
      last = std::max(last, piece_of(e.offset + e.numel() - 1));
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

ZeroParamGather::~ZeroParamGather() {
  // The group may cancel unfinished work when destroyed; finish it first.
  settle(core::Stream::cpu()).IgnoreError();
}

absl::Status ZeroParamGather::issue(const core::Stream& stream) {
  if (!works_.empty()) {
    return absl::FailedPreconditionError(
        "zero param gather: the last step's broadcasts were not settled");
  }
  const core::Tensor values = store_.flat_values(dtype_);
  comm::CollectiveOptions o;
  o.stream = stream;
  for (const Piece& p : pieces_) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, values.slice(p.begin, p.end));
    absl::StatusOr<comm::WorkPtr> w = pg_->broadcast(t, p.root, o);
    if (!w.ok()) {
      // The pieces issued so far still finish before anything reads the weights.
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
    if (compute_->is_cuda()) {
      w->wait_stream(*compute_);
    } else {
      COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "low_level_zero: gathering the parameters"));
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroParamGather::settle(const core::Stream& on) {
  absl::Status first;
  for (const comm::WorkPtr& w : works_) {
    if (on.is_cuda()) {
      w->wait_stream(on);
    } else {
      absl::Status s = w->wait();
      if (first.ok() && !s.ok()) first = s;
    }
  }
  works_.clear();
  waited_ = 0;
  return core::annotate(first, "low_level_zero: gathering the parameters");
}

}  // namespace colossal::parallel
