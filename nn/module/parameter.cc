#include "nn/module/parameter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "core/status/suggest.h"

namespace colossal::nn {

absl::Status ParameterTable::add(std::string name, const core::Shape& shape, core::DType dtype) {
  if (name.empty()) return absl::InvalidArgumentError("parameter with an empty name");
  if (index_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter \"", name, "\" declared twice"));
  }
  if (!core::dtype_is_floating(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter \"", name, "\" has dtype ",
                                                   core::dtype_name(dtype),
                                                   "; parameters are floating point"));
  }
  const int key = static_cast<int>(dtype);
  if (!buffer_numel_.contains(key)) dtypes_.push_back(dtype);
  int64_t& end = buffer_numel_[key];
  const int64_t align = std::max<int64_t>(1, 16 / static_cast<int64_t>(core::dtype_size(dtype)));
  const int64_t offset = (end + align - 1) / align * align;
  end = offset + shape.numel();
  index_[name] = entries_.size();
  entries_.push_back(ParameterEntry{std::move(name), shape, dtype, offset});
  return absl::OkStatus();
}

const ParameterEntry* ParameterTable::find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

int64_t ParameterTable::buffer_numel(core::DType dtype) const {
  auto it = buffer_numel_.find(static_cast<int>(dtype));
  return it == buffer_numel_.end() ? 0 : it->second;
}

int64_t ParameterTable::parameter_count() const {
  int64_t n = 0;
  for (const ParameterEntry& e : entries_) n += e.numel();
  return n;
}

absl::StatusOr<ParameterStore> ParameterStore::create(const ParameterTable& table,
                                                      const core::Stream& stream) {
  ParameterStore store;
  store.table_ = std::make_shared<const ParameterTable>(table);
  for (core::DType dtype : table.dtypes()) {
    const int64_t n = table.buffer_numel(dtype);
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor values, core::Tensor::empty({n}, dtype, stream));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor grads, core::Tensor::empty({n}, dtype, stream));
    COLOSSAL_RETURN_IF_ERROR(values.set_zero(stream));
    COLOSSAL_RETURN_IF_ERROR(grads.set_zero(stream));
    store.values_[static_cast<int>(dtype)] = values;
    store.grads_[static_cast<int>(dtype)] = grads;
  }
  for (const ParameterEntry& e : store.table_->entries()) {
    const core::Tensor& values = store.values_[static_cast<int>(e.dtype)];
    const core::Tensor& grads = store.grads_[static_cast<int>(e.dtype)];
    const size_t byte_offset = static_cast<size_t>(e.offset) * core::dtype_size(e.dtype);
    Parameter p;
    p.name = e.name;
    COLOSSAL_ASSIGN_OR_RETURN(p.value, core::Tensor::from_storage(values.storage(), byte_offset,
                                                                  e.shape, e.dtype));
    COLOSSAL_ASSIGN_OR_RETURN(p.grad, core::Tensor::from_storage(grads.storage(), byte_offset,
                                                                 e.shape, e.dtype));
    store.parameters_.push_back(std::move(p));
  }
  return store;
}

core::Tensor ParameterStore::flat_values(core::DType dtype) const {
  auto it = values_.find(static_cast<int>(dtype));
  return it == values_.end() ? core::Tensor() : it->second;
}

core::Tensor ParameterStore::flat_grads(core::DType dtype) const {
  auto it = grads_.find(static_cast<int>(dtype));
  return it == grads_.end() ? core::Tensor() : it->second;
}

absl::StatusOr<Parameter> ParameterStore::find(absl::string_view name) const {
  if (table_ != nullptr) {
    const ParameterEntry* e = table_->find(name);
    if (e != nullptr) return parameters_[static_cast<size_t>(e - table_->entries().data())];
  }
  std::vector<absl::string_view> names;
  for (const Parameter& p : parameters_) names.push_back(p.name);
  return absl::NotFoundError(
      absl::StrCat("no parameter \"", name, "\"", core::did_you_mean(name, names)));
}

absl::Status ParameterStore::zero_grad(const core::Stream& stream) {
  for (auto& [key, grads] : grads_) COLOSSAL_RETURN_IF_ERROR(grads.set_zero(stream));
  return absl::OkStatus();
}

}  // namespace colossal::nn
