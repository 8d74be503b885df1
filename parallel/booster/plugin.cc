#include "parallel/booster/plugin.h"

#include "core/status/status.h"

namespace colossal::parallel {

absl::Status Plugin::materialize(nn::ParameterStore& store, uint64_t seed,
                                 const core::Stream& stream) {
  COLOSSAL_RETURN_IF_ERROR(store.allocate(stream));
  return store.initialize(seed, stream);
}

}  // namespace colossal::parallel
