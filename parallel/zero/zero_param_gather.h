// colossal::parallel — ZeRO's parameter gather overlapped with the next
// forward (Colossal-AI's LowLevelZeroPlugin `overlap_allgather`).
//
// After the step every rank has updated its own slice of the flat weights
// (zero_shard.h: rank r owns the contiguous [r*S, min((r+1)*S, N))). Without
// overlap one all_gather of the whole model precedes the next forward. Here
// each slice is cut into pieces of at most `piece_elements`, and round i
// sends every rank's i-th piece to every other rank (one group of sends and
// receives: every link carries a piece in both directions at once, as in
// the all_gather, and each rank receives the all_gather's bytes). The next
// forward waits for a round only when the first module that uses it is
// about to run (a forward pre-hook), so the gather of later rounds overlaps
// the compute of earlier modules. The pieces land in place: each rank's
// Adam wrote its own slice of the weights, the others receive into theirs.
//
//   COLOSSAL_ASSIGN_OR_RETURN(auto gather, ZeroParamGather::create(pg, model, store, dtype, shard, cap));
//   step:    gather->settle(step_stream); Adam writes this rank's slice; gather->issue(step_stream);
//   forward: gather->begin_forward(compute); model.forward(...); gather->end_forward();
//   any other reader or writer of the weights: gather->settle(its stream) first.
//
// Contract: every rank issues the same rounds in the same order (issue()
// is called by every rank's step). Hooks wait on the compute stream given to
// begin_forward (CUDA: the stream waits, the host does not; CPU: the host
// waits); a forward run without begin_forward waits for every round on the
// host. end_forward makes the compute stream wait for every round the
// forward did not reach (a module it skipped), so after a forward the whole
// model is current. Not for concurrent callers.
#ifndef COLOSSAL_PARALLEL_ZERO_ZERO_PARAM_GATHER_H_
#define COLOSSAL_PARALLEL_ZERO_ZERO_PARAM_GATHER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"
#include "parallel/zero/zero_shard.h"

namespace colossal::parallel {

class ZeroParamGather {
 public:
  // Over `store`'s flat buffer of `dtype`, cut as `shard` says for `pg`'s
  // ranks, each slice into pieces of at most `piece_elements` (> 0); hooks into `model`'s
  // modules that declare parameters. Errors: a module declaring a parameter
  // the table lacks, a bad piece size (InvalidArgument).
  static absl::StatusOr<std::shared_ptr<ZeroParamGather>> create(
      std::shared_ptr<comm::ProcessGroup> pg, nn::Module& model, const nn::ParameterStore& store,
      core::DType dtype, const ZeroShard& shard, int64_t piece_elements);
  ~ZeroParamGather();

  // Issues every round, ordered after the work queued on `stream` (the
  // step's: it wrote this rank's slice). The previous rounds must be settled.
  // Errors: a collective's.
  absl::Status issue(const core::Stream& stream);
  // The stream the forward's hooks make wait (see the file comment).
  void begin_forward(const core::Stream& compute);
  absl::Status end_forward();
  // Every issued round waited for on `on` (the CPU stream: the host waits).
  // Errors: the first failed collective's.
  absl::Status settle(const core::Stream& on);

  // Rounds issued since create (tests), and the rounds one issue() has.
  int64_t issued() const { return issued_; }
  int64_t rounds() const { return rounds_; }

 private:
  ZeroParamGather() = default;
  // Rank r's i-th piece: flat elements [*begin, *end) (empty past its slice).
  void piece(int r, int64_t i, int64_t* begin, int64_t* end) const;
  // The round that brings flat element x.
  int64_t round_of(int64_t x) const;
  // A module's hook: waits for rounds [waited_, last].
  absl::Status wait_through(int64_t last);

  std::shared_ptr<comm::ProcessGroup> pg_;
  nn::ParameterStore store_;
  core::DType dtype_ = core::DType::kF32;
  ZeroShard shard_;
  int64_t numel_ = 0, piece_ = 0, rounds_ = 0;
  // One per round while issued and not settled (null: a round without work
  // on this rank).
  std::vector<comm::WorkPtr> works_;
  size_t waited_ = 0;  // rounds [0, waited_) waited for by the forward
  std::optional<core::Stream> compute_;
  int64_t issued_ = 0;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_ZERO_PARAM_GATHER_H_
