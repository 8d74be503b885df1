#include "core/tensor/shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status/check.h"

namespace colossal::core {

std::string dims_to_string(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::StatusOr<Shape> Shape::make(absl::Span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", dims_to_string(dims), " has ",
                                                   dims.size(), " dimensions; at most ", kMaxRank,
                                                   " are supported"));
  }
  Shape shape;
  int64_t numel = 1;
  bool has_zero = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", dims_to_string(dims),
                                                     " has a negative dimension (", dims[i],
                                                     " at index ", i, ")"));
    }
    has_zero = has_zero || dims[i] == 0;
    // Saturate instead of overflowing, so the check below sees the excess.
    if (dims[i] != 0 && numel > kMaxNumel / dims[i]) {
      numel = kMaxNumel + 1;
    } else if (dims[i] != 0) {
      numel *= dims[i];
    }
    shape.dims_[i] = dims[i];
  }
  if (!has_zero && numel > kMaxNumel) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", dims_to_string(dims),
                                                   " has more than 2^48 elements"));
  }
  shape.rank_ = static_cast<int>(dims.size());
  return shape;
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  absl::StatusOr<Shape> shape = make(absl::MakeConstSpan(dims.begin(), dims.size()));
  COLOSSAL_CHECK_OK(shape.status());
  *this = *shape;
}

int64_t Shape::operator[](int i) const {
  COLOSSAL_CHECK(i >= -rank_ && i < rank_) << "dimension " << i << " of shape " << to_string();
  return dims_[i < 0 ? i + rank_ : i];
}

int64_t Shape::numel() const {
  // make() bounds the product only when no dimension is 0: an empty shape's
  // other dimensions may multiply past int64 ([2^40, 2^40, 0]).
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] == 0) return 0;
  }
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::to_string() const { return dims_to_string(dims()); }

std::ostream& operator<<(std::ostream& out, const Shape& shape) { return out << shape.to_string(); }

}  // namespace colossal::core
