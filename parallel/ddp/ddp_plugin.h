// colossal::parallel — the `ddp` plugin: data parallelism as torch's
// DistributedDataParallel (Colossal-AI's TorchDDPPlugin).
//
// Every rank holds the whole model. At boost, rank 0's parameters are
// broadcast to every rank (and, for 16-bit models, the optimizer's fp32
// masters). The flat gradient buffer of each dtype (nn/module/parameter.h) is
// cut into buckets of about bucket_cap_mb, walking the parameters in reverse
// table order (the order backward finishes them), so a bucket is one
// contiguous range of the flat buffer. During Booster::backward, when a
// module's backward is done (its backward hook), its own parameters'
// gradients are final; a bucket whose parameters are all final is
// all-reduced (average) asynchronously while the backward goes on. Buckets
// are launched in bucket order, so every rank issues the same collectives in
// the same order. Booster::step waits for every bucket before the optimizer
// (and clipping) runs, so the clipping norm is the global one.
//
//   std::shared_ptr<comm::ProcessGroup> pg = ...;   // comm/builtin or comm/nccl
//   DdpOptions o;
//   o.bucket_cap_mb = 25;
//   COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<DdpPlugin> ddp, DdpPlugin::create(pg, o));
//   Booster booster(std::move(ddp));
//   COLOSSAL_RETURN_IF_ERROR(booster.boost(*model, model->store(), *optimizer));
// (parallel/ddp/ddp_test.cc; the training loop is in parallel/booster/booster.h)
//
// Details:
//   * A parameter belongs to the module that declares it (Module::declare of
//     the module minus its children's). Its gradient counts as final after
//     that module's backward hook. A parameter another module writes later
//     in the same backward would be reduced too early: models must write a
//     tied weight's gradient before its owner's backward ends (GPT-2 does:
//     the head before the embedding).
//   * Parameters no hook finalised (not reached by this backward) are
//     finalised when the model's backward returns; so are their buckets.
//   * no_sync (Booster::no_sync): hooks do nothing; gradients accumulate in
//     the flat buffer; the next synced backward reduces the whole sum.
//   * Before each backward the plugin waits for the previous backward's
//     reductions (the buffer must not change under a running all-reduce).
//   * Padding between parameters (zeros) lies inside the buckets; it stays 0.
//   * CPU gradients on comm/builtin: collectives complete on the host. CUDA
//     gradients on comm/nccl: all-reduces are issued with the compute stream
//     as their input stream and the optimizer's stream waits for them with
//     Work::wait_stream (no host wait). The CUDA path is untested here.
//   * Not here: torch's smaller first bucket, gradient-as-bucket-view
//     rebuilding, find_unused_parameters, static_graph, checkpoint I/O.
#ifndef COLOSSAL_PARALLEL_DDP_DDP_PLUGIN_H_
#define COLOSSAL_PARALLEL_DDP_DDP_PLUGIN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "core/dtype/dtype.h"
#include "parallel/booster/plugin.h"
#include "parallel/common/grad_buckets.h"

namespace colossal::parallel {

struct DdpOptions {
  // Bytes per bucket, in MiB (torch's bucket_cap_mb). A bucket holds at least
  // one parameter, so a parameter larger than this is a bucket of its own.
  // Positive and finite.
  double bucket_cap_mb = 25.0;
  // Broadcast rank 0's parameters at boost (torch always does).
  bool broadcast_parameters = true;
  // false: every bucket is all-reduced after the backward returns instead of
  // beside it (hybrid_parallel's overlap_communication at zero_stage 0).
  bool overlap_communication = true;
};

// GradBucket and make_grad_buckets (the bucket layout: per dtype, reverse
// table order, closed at the cap) are in parallel/common/grad_buckets.h.

class DdpPlugin : public Plugin {
 public:
  // Errors: a null group, a bad bucket_cap_mb (InvalidArgument).
  static absl::StatusOr<std::unique_ptr<DdpPlugin>> create(std::shared_ptr<comm::ProcessGroup> pg,
                                                           const DdpOptions& options = {});
  ~DdpPlugin() override;

  const char* name() const override { return "ddp"; }
  int dp_rank() const override;
  int dp_size() const override;

  absl::Status boost(nn::Module& model, const nn::ParameterStore& store,
                     nn::Optimizer& optimizer) override;
  absl::Status begin_backward(core::Context& ctx, bool sync) override;
  absl::Status end_backward(bool ok) override;
  absl::Status before_step(const core::Stream& stream) override;

  // The buckets (empty before boost).
  const std::vector<GradBucket>& buckets() const;
  // All-reduces issued so far, and how many of them were issued from a
  // module's backward hook (the rest when the model's backward returned).
  int64_t reductions_issued() const;
  int64_t reductions_issued_in_hooks() const;

  struct State;  // shared with the model's hooks

 private:
  explicit DdpPlugin(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_DDP_DDP_PLUGIN_H_
