#include "parallel/zero/low_level_zero_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "kernels/elementwise/elementwise.h"

namespace colossal::parallel {
namespace {

// The table entry of optimizer parameter `name` (boost checked they all exist).
absl::StatusOr<const nn::ParameterEntry*> entry_of(const nn::ParameterTable& table,
                                                   const std::string& name) {
  const nn::ParameterEntry* e = table.find(name);
  if (e == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("low_level_zero: optimizer parameter \"", name,
                                                   "\" is not in the model's table"));
  }
  return e;
}

// Where gathered pieces of the ranks' slices go: for each optimizer
// parameter (by flat offset), its K streamed tensors (the dict's keys).
class StateLayout {
 public:
  // K moments: 0 exp_avg, 1 exp_avg_sq, 2 master (16-bit models).
  // tensors = false: the meta alone (a rank that does not write the file).
  static absl::StatusOr<StateLayout> create(const nn::ParameterTable& table,
                                            const nn::Optimizer& optimizer, int K,
                                            int64_t step_count, bool tensors) {
    StateLayout b;
    b.K_ = K;
    b.out_.held.meta.type = optimizer.type();
    const char* names[3] = {"exp_avg", "exp_avg_sq", "master"};
    for (int g = 0; g < optimizer.num_groups(); ++g) {
      nn::GroupState gs;
      gs.hyper = optimizer.group_hyper(g);
      for (const nn::ParamRef& p : optimizer.group_params(g)) {
        gs.params.push_back(p.name);
        if (!tensors) continue;
        COLOSSAL_ASSIGN_OR_RETURN(const nn::ParameterEntry* e, entry_of(table, p.name));
        b.runs_.push_back(Run{e->offset, e->numel(), b.out_.streamed.size()});
        for (int m = 0; m < K; ++m) {
          b.out_.streamed.push_back({nn::state_key(p.name, names[m]), core::DType::kF32, e->shape});
        }
        COLOSSAL_ASSIGN_OR_RETURN(
            core::Tensor step,
            core::Tensor::empty(core::Shape(), core::DType::kI64, core::Stream::cpu()));
        *step.data<int64_t>() = step_count;
        b.out_.held.tensors[nn::state_key(p.name, "step")] = std::move(step);
      }
      b.out_.held.meta.groups.push_back(std::move(gs));
    }
    std::sort(b.runs_.begin(), b.runs_.end(),
              [](const Run& x, const Run& y) { return x.offset < y.offset; });
    return b;
  }

  // `block` (host) holds, for every rank j in order, K runs of `len` floats:
  // moment m of j's slice elements [at, at + len), i.e. flat elements
  // [j*S + at, j*S + at + len). Each part inside a parameter goes to
  // `piece`; elements outside every parameter (padding, alignment gaps,
  // frozen parameters) are skipped.
  absl::Status add(const core::Tensor& block, int world, int64_t S, int64_t at, int64_t len,
                   const nn::StatePieceFn& piece) const {
    for (int j = 0; j < world; ++j) {
      for (int m = 0; m < K_; ++m) {
        const int64_t src = (static_cast<int64_t>(j) * K_ + m) * len;
        const int64_t lo = j * S + at, hi = lo + len;
        // The first parameter ending after lo.
        auto it = std::upper_bound(runs_.begin(), runs_.end(), lo,
                                   [](int64_t v, const Run& r) { return v < r.offset + r.numel; });
        for (; it != runs_.end() && it->offset < hi; ++it) {
          const int64_t a = std::max(lo, it->offset), e = std::min(hi, it->offset + it->numel);
          COLOSSAL_ASSIGN_OR_RETURN(core::Tensor part, block.slice(src + (a - lo), src + (e - lo)));
          piece(it->first + m, a - it->offset, part);
        }
      }
    }
    return absl::OkStatus();
  }

  nn::StreamedOptimizerState take() { return std::move(out_); }

 private:
  struct Run {
    int64_t offset, numel;
    size_t first;  // its exp_avg's index in the streamed tensors
  };
  int K_ = 2;
  std::vector<Run> runs_;  // by offset
  nn::StreamedOptimizerState out_;
};

// Slice elements per collective when gathering slices: bounds the staging
// to world * K * 4 bytes * this (96 MiB per rank for a 16-bit model) however
// large the model.
constexpr int64_t kGatherChunk = int64_t{8} << 20;
// Masters widened to float32 per piece of this many elements when loading
// (32 MiB of staging, whatever the parameter's size).
constexpr int64_t kMasterPiece = int64_t{8} << 20;

}  // namespace

absl::StatusOr<nn::StreamedOptimizerState> stream_zero_adam_state(
    comm::ProcessGroup& pg, const nn::ParameterTable& table, const nn::Optimizer& optimizer,
    const ZeroShard& shard, const ZeroAdamTensors& slice, const core::Stream& stream, bool whole,
    int64_t chunk_elements) {
  const int64_t n = shard.end - shard.begin;
  const int K = slice.master.defined() ? 3 : 2;
  const core::Tensor* parts[3] = {&slice.exp_avg, &slice.exp_avg_sq, &slice.master};
  for (int m = 0; m < K && n > 0; ++m) {
    if (!parts[m]->defined() || parts[m]->numel() < n || parts[m]->dtype() != core::DType::kF32) {
      return absl::InternalError(absl::StrCat("low_level_zero: slice tensor ", m, " is ",
                                              parts[m]->to_string()));
    }
  }
  COLOSSAL_ASSIGN_OR_RETURN(StateLayout layout, StateLayout::create(table, optimizer, K, slice.step, whole));
  auto where = std::make_shared<const StateLayout>(layout);
  nn::StreamedOptimizerState out = layout.take();
  // Chunk by chunk of the slice: rank j's send block is [m][len] (zeros past
  // its slice), the gathered one [j][m][len], copied to the host and handed
  // out in pieces. Runs later (the save calls it): it holds what it reads.
  out.write = [&pg, shard, slice, stream, whole, chunk_elements, K, where](const nn::StatePieceFn& piece)
      -> absl::Status {
    const int64_t S = shard.size;
    const int64_t n = shard.end - shard.begin;
    const int world = pg.size();
    const core::Tensor* parts[3] = {&slice.exp_avg, &slice.exp_avg_sq, &slice.master};
    const int64_t C =
        std::max<int64_t>(1, std::min(S, chunk_elements > 0 ? chunk_elements : kGatherChunk));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor send, core::Tensor::empty({K * C}, core::DType::kF32, stream));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor recv,
                              core::Tensor::empty({world * K * C}, core::DType::kF32, stream));
    core::Tensor host;  // only where the state is written
    if (whole) {
      COLOSSAL_ASSIGN_OR_RETURN(host, core::Tensor::empty({world * K * C}, core::DType::kF32,
                                                          core::Stream::cpu()));
    }
    for (int64_t at = 0; at < S; at += C) {
      const int64_t len = std::min(C, S - at);
      const int64_t mine = std::clamp<int64_t>(n - at, 0, len);  // real elements of this chunk
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor snd, send.slice(0, K * len));
      if (mine < len) COLOSSAL_RETURN_IF_ERROR(snd.set_zero(stream));
      for (int m = 0; m < K && mine > 0; ++m) {
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, send.slice(m * len, m * len + mine));
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, parts[m]->slice(at, at + mine));
        COLOSSAL_RETURN_IF_ERROR(dst.copy_from(src, stream));
      }
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor rcv, recv.slice(0, world * K * len));
      {
        comm::CollectiveOptions o;
        o.stream = stream;
        COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, pg.all_gather(rcv, snd, o));
        COLOSSAL_RETURN_IF_ERROR(core::annotate(
            w->wait(), absl::StrCat("low_level_zero: gathering Adam states (elements ", at, "..",
                                    at + len, " of each slice's ", S, ")")));
      }
      if (!whole) continue;  // (the collective waited on the host: send / recv are free)
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, host.slice(0, world * K * len));
      COLOSSAL_RETURN_IF_ERROR(h.copy_from(rcv, stream));
      stream.synchronize();  // the host reads `h`; the next chunk reuses send / recv
      COLOSSAL_RETURN_IF_ERROR(where->add(h, world, S, at, len, piece));
    }
    return absl::OkStatus();
  };
  return out;
}

absl::StatusOr<nn::OptimizerStateDict> gather_zero_adam_state(
    comm::ProcessGroup& pg, const nn::ParameterTable& table, const nn::Optimizer& optimizer,
    const ZeroShard& shard, const ZeroAdamTensors& slice, const core::Stream& stream,
    bool whole, int64_t chunk_elements) {
  COLOSSAL_ASSIGN_OR_RETURN(nn::StreamedOptimizerState streamed,
                            stream_zero_adam_state(pg, table, optimizer, shard, slice, stream, whole,
                                                   chunk_elements));
  return nn::collect_streamed(std::move(streamed), whole);
}

absl::StatusOr<ZeroAdamSlice> load_zero_adam_state(const nn::OptimizerStateDict& state,
                                                   const nn::ParameterStore& store,
                                                   nn::Optimizer& optimizer,
                                                   const ZeroShard& shard, bool with_master,
                                                   const ZeroAdamTargets* into) {
  const nn::ParameterTable& table = store.table();
  // The model's weight called `name` (16-bit: the optimizer's model copy;
  // float32: its own master), or undefined.
  const auto weight = [&store](const std::string& name) {
    absl::StatusOr<nn::Parameter> p = store.find(name);
    return p.ok() ? p->value : core::Tensor();
  };
  // One step count for the slice: refuse differing counts before the
  // optimizer changes (malformed step tensors are left to its checks).
  std::string first_name;  // empty: no step count seen yet
  int64_t first = 0;
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      const auto it = state.tensors.find(nn::state_key(p.name, "step"));
      if (it == state.tensors.end()) continue;
      const core::Tensor& t = it->second;
      if (!t.defined() || t.dtype() != core::DType::kI64 || t.numel() != 1 ||
          !t.device().is_cpu()) {
        continue;
      }
      const int64_t step = *t.data<int64_t>();
      if (first_name.empty()) {
        first_name = p.name;
        first = step;
      } else if (step != first) {
        return absl::InvalidArgumentError(
            absl::StrCat("low_level_zero: load_optimizer_state_dict: the state has ", first,
                         " steps for \"", first_name, "\" but ", step, " for \"", p.name,
                         "\"; this plugin steps every parameter together (one step count)"));
      }
    }
  }
  // Validates everything first (nothing changes on an error); the
  // optimizer's own state is never allocated: only this slice is kept, so a
  // resume needs no full-size copy of the state on the device.
  COLOSSAL_RETURN_IF_ERROR(core::annotate(optimizer.check_state_dict(state), "low_level_zero"));

  ZeroAdamSlice out;
  const int64_t n = shard.end - shard.begin;
  // Every parameter of the slice has a master to load (the dict's, or its
  // 16-bit weight), checked before anything is written.
  for (int g = 0; g < optimizer.num_groups() && with_master; ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      COLOSSAL_ASSIGN_OR_RETURN(const nn::ParameterEntry* e, entry_of(table, p.name));
      if (std::max(e->offset, shard.begin) >= std::min(e->offset + e->numel(), shard.end)) continue;
      const auto saved = state.tensors.find(nn::state_key(p.name, "master"));
      const core::Tensor src_t = saved != state.tensors.end() ? saved->second : weight(p.name);
      if (!src_t.defined() || src_t.numel() != e->numel()) {
        return absl::InternalError(absl::StrCat("low_level_zero: no master for ", p.name));
      }
    }
  }
  const core::Stream& stream = optimizer.stream();
  // Alignment gaps and non-optimizer parameters stay 0.
  if (into == nullptr) {
    out.exp_avg.resize(n);
    out.exp_avg_sq.resize(n);
    if (with_master) out.master.resize(n);
  } else if (n > 0) {
    std::vector<const core::Tensor*> targets = {&into->exp_avg, &into->exp_avg_sq};
    if (with_master) targets.push_back(&into->master);
    for (const core::Tensor* t : targets) {
      if (!t->defined() || t->dtype() != core::DType::kF32 || t->numel() < n) {
        return absl::InternalError(absl::StrCat("low_level_zero: a load target is ", t->to_string()));
      }
    }
    for (const core::Tensor* t : targets) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor slice, t->slice(0, n));
      COLOSSAL_RETURN_IF_ERROR(slice.set_zero(t->device().is_cuda() ? stream : core::Stream::cpu()));
    }
  }
  // Elements [at, at + piece.numel()) of the slice's part `part` (0
  // exp_avg, 1 exp_avg_sq, 2 master) from `piece` (float32 on the host).
  auto put = [&](int part, int64_t at, const core::Tensor& piece) -> absl::Status {
    if (into == nullptr) {
      std::vector<float>& v = part == 0 ? out.exp_avg : part == 1 ? out.exp_avg_sq : out.master;
      std::memcpy(v.data() + at, piece.raw_data(), piece.nbytes());
      return absl::OkStatus();
    }
    const core::Tensor& t = part == 0 ? into->exp_avg : part == 1 ? into->exp_avg_sq : into->master;
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, t.slice(at, at + piece.numel()));
    if (!t.device().is_cuda()) return dst.copy_from(piece, core::Stream::cpu());
    COLOSSAL_RETURN_IF_ERROR(dst.copy_from(piece, stream));
    stream.synchronize();  // `piece` may be a buffer freed or reused next
    return absl::OkStatus();
  };
  // A host copy of `t` (a dict tensor on the optimizer's device, or a model
  // copy), or `t` itself.
  auto on_host = [&](const core::Tensor& t) -> absl::StatusOr<core::Tensor> {
    if (t.device().is_cpu()) return t;
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, t.to(core::Device::cpu(), stream));
    stream.synchronize();
    return h;
  };
  // Parameters with a saved master: it goes into the model copy (16-bit:
  // its rounding) or, for float32 parameters, into the weights (their own
  // masters), as nn::Optimizer::load_state_dict writes it.
  std::vector<std::pair<nn::ParamRef, core::Tensor>> rounded;
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      COLOSSAL_ASSIGN_OR_RETURN(const nn::ParameterEntry* e, entry_of(table, p.name));
      const auto saved = state.tensors.find(nn::state_key(p.name, "master"));
      if (saved != state.tensors.end()) rounded.emplace_back(p, saved->second);
      const int64_t lo = std::max(e->offset, shard.begin);
      const int64_t hi = std::min(e->offset + e->numel(), shard.end);
      if (lo >= hi) continue;
      for (int part : {0, 1}) {
        // Adam-family states always hold both (check_state_dict: float32, the shape).
        COLOSSAL_ASSIGN_OR_RETURN(
            core::Tensor t,
            on_host(state.tensors.at(nn::state_key(p.name, part == 0 ? "exp_avg" : "exp_avg_sq"))));
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, t.reshape({t.numel()}));
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, flat.slice(lo - e->offset, hi - e->offset));
        COLOSSAL_RETURN_IF_ERROR(put(part, lo - shard.begin, src));
      }
      if (!with_master) continue;
      // The dict's master, else the 16-bit weight (both checked above),
      // widened a bounded piece at a time.
      const core::Tensor src_t = saved != state.tensors.end() ? saved->second : weight(p.name);
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, on_host(src_t));
      const int64_t width = static_cast<int64_t>(core::dtype_size(h.dtype()));
      for (int64_t at = lo; at < hi; at += kMasterPiece) {
        const int64_t len = std::min(kMasterPiece, hi - at);
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor wide,
                                  core::Tensor::empty({len}, core::DType::kF32, core::Stream::cpu()));
        const char* base = static_cast<const char*>(h.raw_data()) + (at - e->offset) * width;
        COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
            kernels::elementwise::cast_cpu(wide.raw_data(), base, len, core::DType::kF32, h.dtype()),
            absl::StrCat("low_level_zero: the master of ", p.name)));
        COLOSSAL_RETURN_IF_ERROR(put(2, at - shard.begin, wide));
      }
    }
  }
  // Now the optimizer's hyper-parameters and step counts, and the model
  // copies: every rank's whole model gets the saved masters' rounding (as
  // nn::Optimizer::load_state_dict gives it), one parameter at a time.
  COLOSSAL_RETURN_IF_ERROR(core::annotate(optimizer.load_state_meta(state), "low_level_zero"));
  for (int g = 0; g < optimizer.num_groups() && out.step == 0; ++g) {
    const std::vector<nn::ParamRef> params = optimizer.group_params(g);
    if (!params.empty()) {
      COLOSSAL_ASSIGN_OR_RETURN(out.step, optimizer.param_step(params.front().name));
    }
  }
  for (auto& [p, master] : rounded) {
    core::Tensor target = weight(p.name);
    if (!target.defined()) continue;
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor m, on_host(master));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor c, core::Tensor::empty(target.shape(), target.dtype(),
                                                                  core::Stream::cpu()));
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::elementwise::cast_cpu(c.raw_data(), m.raw_data(), m.numel(), c.dtype(),
                                       core::DType::kF32),
        absl::StrCat("low_level_zero: the saved master of ", p.name)));
    const bool cuda = target.device().is_cuda();
    COLOSSAL_RETURN_IF_ERROR(target.copy_from(c, cuda ? stream : core::Stream::cpu()));
    if (cuda) stream.synchronize();  // `c` is freed next
  }
  return out;
}

}  // namespace colossal::parallel
