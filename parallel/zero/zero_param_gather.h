// colossal::parallel — ZeRO's parameter gather overlapped with the next
// forward (Colossal-AI's LowLevelZeroPlugin `overlap_allgather`).
//
// After the step every rank has updated its own slice of the flat weights
// (zero_shard.h: rank r owns the contiguous [r*S, min((r+1)*S, N))). Without
// overlap one all_gather of the whole model precedes the next forward. Here
// the slices travel as broadcasts of pieces of at most `piece_elements`, in
// flat order, each from the rank that owns it (a slice is contiguous, so a
// piece has one owner; the bytes each rank receives are the all_gather's),
// and the forward waits for a piece only when the first module that uses it
// is about to run (a forward pre-hook), so the gather of later layers
// overlaps the compute of earlier ones. The broadcast writes the weights in
// place: the owner's Adam wrote its slice there, the other ranks receive it.
//
//   COLOSSAL_ASSIGN_OR_RETURN(auto gather, ZeroParamGather::create(pg, model, store, dtype, shard, cap));
//   step:    gather->settle(step_stream); Adam writes this rank's slice; gather->issue(step_stream);
//   forward: gather->begin_forward(compute); model.forward(...); gather->end_forward();
//   any other reader or writer of the weights: gather->settle(its stream) first.
//
// Contract: every rank issues the same broadcasts in the same order (issue()
// is called by every rank's step). Hooks wait on the compute stream given to
// begin_forward (CUDA: the stream waits, the host does not; CPU: the host
// waits); a forward run without begin_forward waits for every piece on the
// host. end_forward makes the compute stream wait for every piece the
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
  // ranks, into pieces of at most `piece_elements` (> 0); hooks into `model`'s
  // modules that declare parameters. Errors: a module declaring a parameter
  // the table lacks, a bad piece size (InvalidArgument).
  static absl::StatusOr<std::shared_ptr<ZeroParamGather>> create(
      std::shared_ptr<comm::ProcessGroup> pg, nn::Module& model, const nn::ParameterStore& store,
      core::DType dtype, const ZeroShard& shard, int64_t piece_elements);
  ~ZeroParamGather();

  // Issues every piece's broadcast, ordered after the work queued on `stream`
  // (the step's: it wrote this rank's slice). The previous pieces must be
  // settled. Errors: a collective's.
  absl::Status issue(const core::Stream& stream);
  // The stream the forward's hooks make wait (see the file comment).
  void begin_forward(const core::Stream& compute);
  absl::Status end_forward();
  // Every issued piece waited for on `on` (the CPU stream: the host waits).
  // Errors: the first failed collective's.
  absl::Status settle(const core::Stream& on);

  // Broadcasts issued since create (tests), and the pieces one issue() has.
  int64_t issued() const { return issued_; }
  int64_t pieces() const { return static_cast<int64_t>(pieces_.size()); }

 private:
  struct Piece {
    int64_t begin = 0, end = 0;  // flat elements
    int root = 0;
  };
  ZeroParamGather() = default;
  // A module's hook: waits for pieces [waited_, last].
  absl::Status wait_through(int64_t last);

  std::shared_ptr<comm::ProcessGroup> pg_;
  nn::ParameterStore store_;
  core::DType dtype_ = core::DType::kF32;
  std::vector<Piece> pieces_;
  std::vector<comm::WorkPtr> works_;  // one per piece while issued and not all waited
  size_t waited_ = 0;                 // pieces [0, waited_) waited for by the forward
  std::optional<core::Stream> compute_;
  int64_t issued_ = 0;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_ZERO_PARAM_GATHER_H_
