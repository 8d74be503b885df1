// colossal::parallel — the `torch_ddp` plugin as recipes write it
// (Colossal-AI's TorchDDPPlugin): option bucket_cap_mb (MiB, default 25).
#ifndef COLOSSAL_PARALLEL_DDP_DDP_SPEC_H_
#define COLOSSAL_PARALLEL_DDP_DDP_SPEC_H_

#include <memory>

#include "absl/status/statusor.h"
#include "parallel/registry/plugin_spec.h"

namespace colossal::parallel {

// Errors: option_error("bucket_cap_mb", ...) unless positive.
absl::StatusOr<std::unique_ptr<PluginSpec>> make_ddp_spec(OptionSource& options);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_DDP_DDP_SPEC_H_
