// colossal::nn — parameters: one table per model, flat buffers, named views.
//
// A model's parameters are listed once, in a ParameterTable: a name (Hugging
// Face spelling for GPT-2, e.g. "transformer.h.0.attn.c_attn.weight"), a shape,
// a dtype and the element offset of the parameter inside the flat buffer of its
// dtype. The table is the single source of truth: a ParameterStore allocates,
// from it, one flat value buffer and one flat gradient buffer per dtype, and
// carves both into named views (Parameter). All-reduce, ZeRO sharding,
// checkpoint I/O and optimizers can then work on contiguous ranges
// (flat_values / flat_grads) while layers work on the views.
//
// Offsets are rounded up so every view starts 16-byte aligned (CUDA vector
// loads); the few padding elements between views are zero in both buffers and
// belong to no parameter.
//
// Modules do not own parameters: each module declares its entries into the
// model's table (Module::declare) and later looks its views up by name
// (Module::bind). See module.h.
//
//   ParameterTable table;
//   COLOSSAL_RETURN_IF_ERROR(table.add("fc.weight", {4, 3}, DType::kF32));
//   COLOSSAL_RETURN_IF_ERROR(table.add("fc.bias", {3}, DType::kF32));
//   COLOSSAL_ASSIGN_OR_RETURN(ParameterStore store, ParameterStore::create(table, Stream::cpu()));
//   COLOSSAL_ASSIGN_OR_RETURN(Parameter w, store.find("fc.weight"));
//   w.value.data<float>()[0] = 1.0f;          // a view into store.flat_values(DType::kF32)
//   COLOSSAL_RETURN_IF_ERROR(store.zero_grad(Stream::cpu()));
#ifndef COLOSSAL_NN_MODULE_PARAMETER_H_
#define COLOSSAL_NN_MODULE_PARAMETER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"

namespace colossal::nn {

// One row of a ParameterTable.
struct ParameterEntry {
  std::string name;
  core::Shape shape;
  core::DType dtype = core::DType::kF32;
  // Element offset into the flat buffer of `dtype` (a multiple of 16 bytes).
  int64_t offset = 0;
  int64_t numel() const { return shape.numel(); }
};

// The ordered list of a model's parameters and their place in the flat buffers.
class ParameterTable {
 public:
  // Appends a parameter at the end of its dtype's buffer. Errors: an empty or
  // duplicate name, a non-floating dtype.
  absl::Status add(std::string name, const core::Shape& shape, core::DType dtype);

  const std::vector<ParameterEntry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  // The entry called `name`, or null.
  const ParameterEntry* find(absl::string_view name) const;
  // Elements of the flat buffer of `dtype` (padding included; 0 if unused).
  int64_t buffer_numel(core::DType dtype) const;
  // Sum of the parameters' element counts (padding excluded).
  int64_t parameter_count() const;
  // The dtypes used, in the order of their first entry.
  const std::vector<core::DType>& dtypes() const { return dtypes_; }

 private:
  std::vector<ParameterEntry> entries_;
  absl::flat_hash_map<std::string, size_t> index_;
  std::vector<core::DType> dtypes_;
  absl::flat_hash_map<int, int64_t> buffer_numel_;
};

// A named view into the flat value and gradient buffers (shared storage).
struct Parameter {
  std::string name;
  core::Tensor value;
  core::Tensor grad;
};

// The flat buffers of one table and their views. Cheap to copy (copies share
// the buffers).
class ParameterStore {
 public:
  ParameterStore() = default;

  // Allocates on `stream`'s device and zeroes values and gradients.
  // Errors: out of memory, the device is not available.
  static absl::StatusOr<ParameterStore> create(const ParameterTable& table,
                                               const core::Stream& stream);

  const ParameterTable& table() const { return *table_; }
  // The whole buffer of `dtype`, 1-D [table().buffer_numel(dtype)]; undefined
  // when the table has no parameter of that dtype.
  core::Tensor flat_values(core::DType dtype) const;
  core::Tensor flat_grads(core::DType dtype) const;
  // Every parameter, in table order.
  const std::vector<Parameter>& parameters() const { return parameters_; }
  // The parameter called `name`. NotFoundError with the closest name otherwise.
  absl::StatusOr<Parameter> find(absl::string_view name) const;
  // Sets every gradient (the whole flat gradient buffers) to zero.
  absl::Status zero_grad(const core::Stream& stream);

 private:
  std::shared_ptr<const ParameterTable> table_;
  absl::flat_hash_map<int, core::Tensor> values_;
  absl::flat_hash_map<int, core::Tensor> grads_;
  std::vector<Parameter> parameters_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODULE_PARAMETER_H_
