// colossal::core — tensor shapes: up to 8 non-negative int64 dimensions.
//
//   Shape s = {4, 1024, 768};           // literals (invalid ones abort)
//   s.rank();                            // 3
//   s.numel();                           // 3145728
//   s.to_string();                       // "[4, 1024, 768]"
//   s[-1];                               // 768 (negative counts from the end)
//   COLOSSAL_ASSIGN_OR_RETURN(Shape u, Shape::make(dims_from_user));  // user input
//
// A rank-0 Shape is a scalar (numel 1). A dimension of 0 is allowed (numel 0).
#ifndef COLOSSAL_CORE_TENSOR_SHAPE_H_
#define COLOSSAL_CORE_TENSOR_SHAPE_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace colossal::core {

class Shape {
 public:
  static constexpr int kMaxRank = 8;
  // numel() never exceeds this (2^48 elements), so byte counts fit in int64.
  static constexpr int64_t kMaxNumel = int64_t{1} << 48;

  // A scalar: rank 0, numel 1.
  Shape() = default;
  // From literal dimensions; aborts (a bug) if there are more than kMaxRank,
  // any is negative, or numel exceeds kMaxNumel. Use make() for user input.
  Shape(std::initializer_list<int64_t> dims);

  // InvalidArgumentError naming the dims when they break the rules above.
  static absl::StatusOr<Shape> make(absl::Span<const int64_t> dims);

  int rank() const { return rank_; }
  // Dimension i, 0 <= i < rank() or -rank() <= i < 0 (from the end); aborts
  // outside that range.
  int64_t operator[](int i) const;
  int64_t numel() const;
  absl::Span<const int64_t> dims() const { return absl::MakeConstSpan(dims_.data(), rank_); }

  // "[2, 3]"; "[]" for a scalar.
  std::string to_string() const;

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims() == b.dims(); }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Shape& shape);

// "[2, -1]": any dims as a shape is printed (for messages about requests).
std::string dims_to_string(absl::Span<const int64_t> dims);

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_TENSOR_SHAPE_H_
