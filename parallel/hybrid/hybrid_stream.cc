// hybrid_parallel's streamed saves (Plugin::streams_state): the whole model
// and optimizer state reach rank 0 one tensor at a time, so no rank holds a
// stage's state, let alone the model's, as a save runs.
//
// Only the data-parallel copy world rank 0 belongs to takes part beyond the
// inner plugin's own gathers (ZeRO's shards over dp). In that copy the tp
// ranks of each stage gather each tensor whole, in the same order (their
// pieces have equal shapes, so their inner streams run alike); tp rank 0 of
// stage 0 is rank 0, which writes its stage's tensors as they come, and tp
// rank 0 of every later stage sends each of its tensors to rank 0. Rank 0
// takes one tensor from each later stage after each of its own, then the
// rest in turns, so no stage waits for whole stages to be written (a
// collective's timeout bounds every wait).
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/module/tensor_split.h"
#include "nn/optim/state_dict.h"
#include "parallel/hybrid/hybrid_state.h"
#include "parallel/hybrid/stage_states.h"

namespace colossal::parallel {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

absl::Status check_to_rank(int to_rank) {
  if (to_rank == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("hybrid_parallel streams its state to rank 0 only, not to rank ", to_rank));
}

absl::StatusOr<core::Tensor> flat_view(const core::Tensor& t) { return t.reshape({t.numel()}); }

// Index of parameter `name` in `table`.
absl::StatusOr<size_t> index_in(const nn::ParameterTable& table, const std::string& name) {
  const nn::ParameterEntry* e = table.find(name);
  if (e == nullptr) {
    return absl::InternalError(absl::StrCat("hybrid_parallel: \"", name, "\" is not in the whole model"));
  }
  return static_cast<size_t>(e - table.entries().data());
}

// Tensor number `index` of a stage's list, sent ahead of the tensor (the
// inner plugin's stream completes tensors in its own order).
absl::Status send_index(HybridParallelPlugin::State& s, int64_t index) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, core::Tensor::empty({1}, core::DType::kI64, core::Stream::cpu()));
  *t.data<int64_t>() = index;
  return s.p2p(t, 0, /*send=*/true);
}

absl::StatusOr<int64_t> recv_index(HybridParallelPlugin::State& s, int stage) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, core::Tensor::empty({1}, core::DType::kI64, core::Stream::cpu()));
  COLOSSAL_RETURN_IF_ERROR(s.p2p(t, stage, /*send=*/false));
  return *t.data<int64_t>();
}

// Rank 0's side of the later stages' sends: `counts[stage]` tensors from
// each, taken by `take(stage)` one from each stage per turn.
class LaterStages {
 public:
  LaterStages(std::vector<int64_t> counts, std::function<absl::Status(int stage)> take)
      : left_(std::move(counts)), take_(std::move(take)) {}

  // One tensor from each stage that has any left.
  absl::Status take_one_each() {
    for (size_t stage = 1; stage < left_.size(); ++stage) {
      if (left_[stage] == 0) continue;
      --left_[stage];
      COLOSSAL_RETURN_IF_ERROR(take_(static_cast<int>(stage)));
    }
    return absl::OkStatus();
  }
  absl::Status take_rest() {
    while (std::any_of(left_.begin() + std::min<size_t>(1, left_.size()), left_.end(),
                       [](int64_t n) { return n > 0; })) {
      COLOSSAL_RETURN_IF_ERROR(take_one_each());
    }
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> left_;  // by stage (stage 0's unused)
  std::function<absl::Status(int stage)> take_;
};

// What a streamed optimizer state's write needs beyond the inner plugin's.
struct OptimizerPlan {
  std::vector<nn::StateTensorDecl> pieces;       // the inner stream's tensors (this rank's pieces)
  std::vector<int64_t> local;                    // per inner tensor: its place in this stage's list, or -1
  std::vector<const nn::ParameterEntry*> split;  // per place: the split parameter, or null
  std::vector<int64_t> first;                    // rank 0: each stage's first index in the whole list
  std::vector<nn::StateTensorDecl> whole;        // rank 0: every stage's list, joined
};

// Takes the inner stream's pieces of this stage's tensors (in the saving
// copy), and hands each one on, gathered whole over tp, once complete.
class StageTensors {
 public:
  // `later`: rank 0's receiver of the later stages' tensors (null elsewhere).
  StageTensors(HybridParallelPlugin::State& s, const OptimizerPlan& plan, const nn::StatePieceFn& piece,
               LaterStages* later)
      : s_(s), plan_(plan), piece_(piece), later_(later) {}

  void add(size_t index, int64_t offset, const core::Tensor& part) {
    if (error_.ok()) error_ = take(index, offset, part);
  }
  absl::Status finish() const {
    COLOSSAL_RETURN_IF_ERROR(error_);
    if (!pending_.empty()) {
      return absl::InternalError(absl::StrCat("hybrid_parallel: the inner plugin left \"",
                                              plan_.pieces[pending_.begin()->first].key, "\" incomplete"));
    }
    return absl::OkStatus();
  }

 private:
  struct Pending {
    core::Tensor buffer;
    int64_t filled = 0;
  };

  absl::Status take(size_t index, int64_t offset, const core::Tensor& part) {
    if (index >= plan_.local.size()) {
      return absl::InternalError(absl::StrCat("hybrid_parallel: the inner plugin's tensor ", index, " is not declared"));
    }
    const int64_t place = plan_.local[index];
    if (place < 0) return absl::OkStatus();  // stage 0 writes it
    const nn::StateTensorDecl& d = plan_.pieces[index];
    Pending& p = pending_[index];
    if (!p.buffer.defined()) {
      COLOSSAL_ASSIGN_OR_RETURN(p.buffer, core::Tensor::empty(d.shape, d.dtype, core::Stream::cpu()));
    }
    if (offset < 0 || part.dtype() != d.dtype || part.numel() > p.buffer.numel() - offset) {
      return absl::InternalError(absl::StrCat("hybrid_parallel: a piece ", part.to_string(), " at ", offset,
                                              " does not fit \"", d.key, "\""));
    }
    std::memcpy(static_cast<char*>(p.buffer.raw_data()) + offset * core::dtype_size(d.dtype), part.raw_data(),
                part.nbytes());
    p.filled += part.numel();
    if (p.filled < p.buffer.numel()) return absl::OkStatus();
    const core::Tensor done = std::move(p.buffer);
    pending_.erase(index);
    return hand_on(place, done);
  }

  absl::Status hand_on(int64_t place, const core::Tensor& t) {
    core::Tensor whole = t;
    if (const nn::ParameterEntry* e = plan_.split[place]) {
      COLOSSAL_ASSIGN_OR_RETURN(whole, s_.gather_whole(*e, t));  // every tp rank of the stage
    }
    if (s_.tp->rank() != 0) return absl::OkStatus();
    if (s_.pipeline.stage != 0) {
      COLOSSAL_RETURN_IF_ERROR(send_index(s_, place));
      return s_.p2p(whole, 0, /*send=*/true);
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, flat_view(whole));
    piece_(static_cast<size_t>(place), 0, flat);  // stage 0's places come first
    return later_ != nullptr ? later_->take_one_each() : absl::OkStatus();
  }

  HybridParallelPlugin::State& s_;
  const OptimizerPlan& plan_;
  const nn::StatePieceFn& piece_;
  LaterStages* later_;
  std::map<size_t, Pending> pending_;
  absl::Status error_;
};

// Rank 0: the state tensors of pipeline stage `stage` as its tp rank 0
// sends them (each after its index in the stage's list).
LaterStages later_state_tensors(HybridParallelPlugin::State& s, const OptimizerPlan& plan,
                                const nn::StatePieceFn& piece) {
  std::vector<int64_t> counts(s.pipeline.stages, 0);
  auto seen = std::make_shared<std::vector<std::vector<bool>>>(s.pipeline.stages);
  for (int stage = 1; stage < s.pipeline.stages; ++stage) {
    const int64_t end = stage + 1 < s.pipeline.stages ? plan.first[stage + 1]
                                                      : static_cast<int64_t>(plan.whole.size());
    counts[stage] = end - plan.first[stage];
    (*seen)[stage].assign(counts[stage], false);
  }
  return LaterStages(counts, [&s, &plan, &piece, seen](int stage) -> absl::Status {
    std::vector<bool>& got = (*seen)[stage];
    COLOSSAL_ASSIGN_OR_RETURN(const int64_t place, recv_index(s, stage));
    if (place < 0 || place >= static_cast<int64_t>(got.size())) {
      return absl::DataLossError(absl::StrCat("pipeline stage ", stage, " sent state tensor ", place,
                                              ", not one of its ", got.size()));
    }
    if (got[place]) {
      return absl::DataLossError(absl::StrCat("pipeline stage ", stage, " sent state tensor ", place, " twice"));
    }
    got[place] = true;
    const int64_t at = plan.first[stage] + place;
    const nn::StateTensorDecl& d = plan.whole[at];
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, core::Tensor::empty(d.shape, d.dtype, core::Stream::cpu()));
    COLOSSAL_RETURN_IF_ERROR(s.p2p(t, stage, /*send=*/false));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, flat_view(t));
    piece(static_cast<size_t>(at), 0, flat);
    return absl::OkStatus();
  });
}

}  // namespace

absl::Status HybridParallelPlugin::stream_model_state(const nn::ParameterStore& store, int to_rank,
                                                     const nn::StatePieceFn& piece) {
  State& s = *state_;
  COLOSSAL_RETURN_IF_ERROR(check_to_rank(to_rank));
  // The inner plugin may still be gathering the last step's weights (ZeRO's overlap_allgather).
  COLOSSAL_RETURN_IF_ERROR(s.inner->sync_weights());
  if (!s.in_saving_copy()) return absl::OkStatus();  // every copy holds the same weights
  COLOSSAL_ASSIGN_OR_RETURN(const nn::ParameterTable whole, s.whole_model_table());
  const std::vector<std::string> left = s.left_to_stage_0();
  // Rank 0 takes the later stages' parameters, in their tables' order, one
  // from each stage after each of its own.
  std::optional<LaterStages> later;
  std::vector<std::vector<size_t>> sent(s.pipeline.stages);  // per stage: whole-table indices
  if (s.world->rank() == 0) {
    std::vector<int64_t> counts(s.pipeline.stages, 0);
    for (int stage = 1; stage < s.pipeline.stages; ++stage) {
      COLOSSAL_ASSIGN_OR_RETURN(const nn::ParameterTable names, s.stage_table(stage));
      const std::vector<std::string> tied = s.whole->tied_parameters();
      for (const nn::ParameterEntry& e : names.entries()) {
        if (contains(tied, e.name)) continue;
        COLOSSAL_ASSIGN_OR_RETURN(const size_t at, index_in(whole, e.name));
        sent[stage].push_back(at);
      }
      counts[stage] = static_cast<int64_t>(sent[stage].size());
    }
    later.emplace(counts, [&, next = std::vector<size_t>(s.pipeline.stages, 0)](int stage) mutable -> absl::Status {
      const size_t at = sent[stage][next[stage]++];
      const nn::ParameterEntry& w = whole.entries()[at];
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, core::Tensor::empty({w.numel()}, w.dtype, core::Stream::cpu()));
      COLOSSAL_RETURN_IF_ERROR(s.p2p(t, stage, /*send=*/false));
      piece(at, 0, t);
      return absl::OkStatus();
    });
  }
  // This stage's parameters, each gathered whole over tp: written by rank 0
  // on stage 0, sent to it from the others, in table order.
  for (size_t i = 0; i < store.parameters().size(); ++i) {
    const nn::ParameterEntry& e = store.table().entries()[i];
    if (contains(left, e.name)) continue;
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, s.gather_whole(e, store.parameters()[i].value));
    if (s.tp->rank() != 0) continue;
    if (s.pipeline.stage != 0) {
      COLOSSAL_RETURN_IF_ERROR(s.p2p(t, 0, /*send=*/true));
      continue;
    }
    COLOSSAL_ASSIGN_OR_RETURN(const size_t at, index_in(whole, e.name));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, flat_view(t));
    piece(at, 0, flat);
    if (later) COLOSSAL_RETURN_IF_ERROR(later->take_one_each());
  }
  return later ? later->take_rest() : absl::OkStatus();
}

absl::StatusOr<nn::StreamedOptimizerState> HybridParallelPlugin::stream_optimizer_state(
    const nn::Optimizer& optimizer, int to_rank) {
  State& s = *state_;
  COLOSSAL_RETURN_IF_ERROR(check_to_rank(to_rank));
  if (s.optimizer == nullptr || (s.pipeline.stages > 1 && s.whole == nullptr)) {
    return absl::FailedPreconditionError("hybrid_parallel: the optimizer state before boost");
  }
  // This rank's pieces' state, as the inner plugin streams it to its dp rank
  // 0 (ddp holds it: handed out a tensor at a time).
  nn::StreamedOptimizerState inner;
  if (s.inner->streams_state()) {
    COLOSSAL_ASSIGN_OR_RETURN(inner, s.inner->stream_optimizer_state(optimizer, 0));
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(nn::OptimizerStateDict held, s.inner->optimizer_state_dict(optimizer, 0));
    COLOSSAL_ASSIGN_OR_RETURN(inner, nn::stream_held(std::move(held), s.in_saving_copy(), s.stream));
  }
  // This stage's list: the inner tensors with whole shapes, but the tied
  // weight's on later stages (stage 0 writes it).
  auto plan = std::make_shared<OptimizerPlan>();
  plan->pieces = inner.streamed;
  std::vector<nn::StateTensorDecl> mine;
  const std::vector<std::string> left = s.left_to_stage_0();
  for (const nn::StateTensorDecl& d : inner.streamed) {
    if (contains(left, nn::param_of_state_key(d.key))) {
      plan->local.push_back(-1);
      continue;
    }
    plan->local.push_back(static_cast<int64_t>(mine.size()));
    const nn::ParameterEntry* e = s.split_entry_of(d.key, d.shape, /*want_whole=*/false);
    plan->split.push_back(e);
    mine.push_back({d.key, d.dtype, e != nullptr ? e->global_shape : d.shape});
  }
  nn::StreamedOptimizerState out;
  out.held = std::move(inner.held);
  const bool writer = s.world->rank() == 0;
  if (s.pipeline.stages > 1 && s.in_saving_copy() && s.tp->rank() == 0) {
    // Rank 0 learns every stage's list (and gets their step counts) first:
    // a checkpoint's files are laid out before any tensor is written.
    const HostP2P p2p = [&s](const core::Tensor& t, int peer, bool send) { return s.p2p(t, peer, send); };
    COLOSSAL_ASSIGN_OR_RETURN(out.held, gather_stage_states(std::move(out.held), s.pipeline.stage,
                                                            s.pipeline.stages, s.whole->tied_parameters(),
                                                            /*to_all=*/false, p2p));
    COLOSSAL_ASSIGN_OR_RETURN(std::vector<std::vector<nn::StateTensorDecl>> lists,
                              gather_stage_decls(mine, s.pipeline.stage, s.pipeline.stages, p2p));
    if (writer) {
      out.held = stage_part(out.held, s.whole->table());  // listed as one process lists them
      for (std::vector<nn::StateTensorDecl>& list : lists) {
        plan->first.push_back(static_cast<int64_t>(plan->whole.size()));
        for (nn::StateTensorDecl& d : list) plan->whole.push_back(std::move(d));
      }
    }
  } else if (writer) {
    plan->first = {0};
    plan->whole = mine;
  }
  if (!writer) out.held.tensors.clear();
  out.streamed = writer ? plan->whole : mine;
  out.write = [this, plan, inner_write = std::move(inner.write)](const nn::StatePieceFn& piece) -> absl::Status {
    State& s = *state_;
    std::optional<LaterStages> later;
    if (s.world->rank() == 0) later.emplace(later_state_tensors(s, *plan, piece));
    StageTensors tensors(s, *plan, piece, later ? &*later : nullptr);
    COLOSSAL_RETURN_IF_ERROR(inner_write([&tensors](size_t index, int64_t offset, const core::Tensor& part) {
      tensors.add(index, offset, part);
    }));
    COLOSSAL_RETURN_IF_ERROR(tensors.finish());
    return later ? later->take_rest() : absl::OkStatus();
  };
  return out;
}

}  // namespace colossal::parallel
