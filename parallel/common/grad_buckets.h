// colossal::parallel — gradient buckets over the flat gradient buffers and
// the machinery that launches one collective per bucket from a model's
// backward hooks: shared by the ddp plugin (all-reduce per bucket) and the
// low_level_zero plugin's stage 2 (reduce-scatter per bucket).
//
// The flat gradient buffer of each dtype (nn/module/parameter.h) is cut into
// buckets, walking the parameters in reverse table order (the order backward
// finishes them), so a bucket is one contiguous range of the flat buffer.
// When a module's backward is done (its backward hook) its own parameters'
// gradients are final; a bucket whose parameters are all final is launched
// (the caller's `launch` issues the collective and returns its Work). Buckets
// are launched in bucket order, so every rank issues the same collectives in
// the same order.
//
//   std::vector<GradBucket> buckets = make_grad_buckets(store.table(), 25 << 20);
//   auto launch = [&](size_t b, const comm::CollectiveOptions& o) {
//     return pg->all_reduce(..., comm::ReduceOp::kAvg, o);   // bucket b's range: a WorkPtr
//   };
//   COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<BucketedGradReducer> r,
//                             BucketedGradReducer::create("ddp", model, store, buckets, launch));
//   per backward: r->begin_backward(ctx.compute_stream(), sync); model.backward(...);
//                 r->end_backward(ok);
//   before the optimizer: r->wait_all(optimizer.stream());
//
// Details (as documented for the ddp plugin, parallel/ddp/ddp_plugin.h):
//   * A parameter belongs to the module that declares it (Module::declare of
//     the module minus its children's); its gradient is final after that
//     module's backward hook. Parameters no hook finalised are finalised when
//     the model's backward returns (end_backward); so are their buckets.
//   * sync = false (no_sync): hooks do nothing.
//   * overlap = false (Colossal-AI's overlap_communication = false): hooks
//     only mark gradients final; every bucket is launched, in bucket order,
//     when the backward returns (end_backward), so no collective runs beside
//     the backward. The same collectives on the same data: the same results.
//   * begin_backward waits for the previous backward's collectives.
//   * CUDA: collectives get the compute stream as their input stream; wait_all
//     on a CUDA stream makes it wait (Work::wait_stream), on the CPU stream it
//     waits on the host.
#ifndef COLOSSAL_PARALLEL_COMMON_GRAD_BUCKETS_H_
#define COLOSSAL_PARALLEL_COMMON_GRAD_BUCKETS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"

namespace colossal::parallel {

// One collective: elements [offset, offset + count) of the flat gradient
// buffer of `dtype`, holding `params` (in reverse table order).
struct GradBucket {
  core::DType dtype = core::DType::kF32;
  int64_t offset = 0;
  int64_t count = 0;
  std::vector<std::string> params;
};

// The buckets of `table` for a cap of `cap_bytes`: per dtype, walking the
// parameters in reverse order, a bucket is closed when adding the next
// parameter would take it past the cap. Buckets of one dtype tile its flat
// buffer. Ordered by closing (for one dtype: from the buffer's end).
std::vector<GradBucket> make_grad_buckets(const nn::ParameterTable& table, int64_t cap_bytes);

// Every module of `model`'s tree that declares parameters itself (not through
// its children), with the table indices of those parameters, in tree order:
// the parameters whose gradients are final after that module's backward hook.
// Errors: a module declaring a parameter `table` lacks (InvalidArgument).
absl::StatusOr<std::vector<std::pair<nn::Module*, std::vector<int>>>> module_owned_parameters(
    nn::Module& model, const nn::ParameterTable& table);

class BucketedGradReducer {
 public:
  // Issues bucket `b`'s collective with `options` (the input stream set on CUDA).
  using Launch = std::function<absl::StatusOr<comm::WorkPtr>(
      size_t b, const comm::CollectiveOptions& options)>;

  // Installs backward hooks on `model`'s modules (they hold a weak reference:
  // they do nothing once the reducer is gone). `who` prefixes error messages.
  // `overlap`: launch buckets from the hooks (true) or at end_backward.
  // Errors: a module declaring a parameter `store` lacks (InvalidArgument).
  static absl::StatusOr<std::shared_ptr<BucketedGradReducer>> create(
      std::string who, nn::Module& model, const nn::ParameterStore& store,
      std::vector<GradBucket> buckets, Launch launch, bool overlap = true);
  ~BucketedGradReducer();

  absl::Status begin_backward(const core::Stream& compute, bool sync);
  absl::Status end_backward(bool ok);
  // Waits for every issued collective (see the file comment); the first error.
  absl::Status wait_all(const core::Stream& stream);
  // Adds an externally issued Work to those wait_all waits for.
  void track(comm::WorkPtr work);

  const std::vector<GradBucket>& buckets() const { return buckets_; }
  int64_t issued() const { return issued_; }
  int64_t issued_in_hooks() const { return issued_in_hooks_; }

 private:
  BucketedGradReducer() = default;
  absl::Status mark_final(int entry);
  absl::Status launch_ready(bool in_hook);
  absl::Status on_module_done(const std::vector<int>& own);

  std::string who_;
  nn::ParameterStore store_;
  std::vector<GradBucket> buckets_;
  Launch launch_;
  std::vector<int> bucket_of_;         // per table entry
  std::vector<int> params_in_bucket_;  // per bucket
  // Per backward.
  std::vector<int> remaining_;  // per bucket: parameters not final yet
  std::vector<char> final_;     // per table entry
  size_t next_launch_ = 0;
  bool in_backward_ = false;
  bool sync_ = false;
  bool overlap_ = true;
  std::optional<core::Stream> input_stream_;
  std::vector<comm::WorkPtr> works_;
  int64_t issued_ = 0;
  int64_t issued_in_hooks_ = 0;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_COMMON_GRAD_BUCKETS_H_
