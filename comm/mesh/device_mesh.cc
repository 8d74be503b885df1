#include "comm/mesh/device_mesh.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status/check.h"
#include "core/status/status.h"
#include "core/status/suggest.h"

namespace colossal::comm {

DeviceMesh::DeviceMesh(int world_size, int rank, std::vector<int> dims,
                       std::vector<std::string> names)
    : world_size_(world_size), rank_(rank), dims_(std::move(dims)), names_(std::move(names)) {
  coords_ = coordinates_of(rank_);
  groups_.resize(dims_.size());
}

absl::StatusOr<DeviceMesh> DeviceMesh::create(int world_size, int rank, std::vector<int> dims,
                                              std::vector<std::string> names) {
  if (dims.empty() || dims.size() != names.size()) {
    return absl::InvalidArgumentError(absl::StrCat("device mesh: ", dims.size(), " sizes and ",
                                                   names.size(), " axis names (need one each)"));
  }
  std::set<std::string> seen;
  int64_t product = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (names[i].empty() || !seen.insert(names[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("device mesh: axis names must be distinct and non-empty (got ",
                       absl::StrJoin(names, ", "), ")"));
    }
    if (dims[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("device mesh: axis '", names[i], "' has size ", dims[i], " (must be >= 1)"));
    }
    product *= dims[i];
  }
  if (product != world_size) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < dims.size(); ++i) parts.push_back(absl::StrCat(names[i], "=", dims[i]));
    return absl::InvalidArgumentError(absl::StrCat("device mesh: ", absl::StrJoin(parts, " x "),
                                                   " = ", product, " ranks, but the world has ",
                                                   world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("device mesh: rank ", rank, " is not in [0, ", world_size, ")"));
  }
  return DeviceMesh(world_size, rank, std::move(dims), std::move(names));
}

absl::StatusOr<DeviceMesh> DeviceMesh::hybrid_parallel(int world_size, int rank, int pp, int tp) {
  if (pp < 1 || tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("hybrid parallel mesh: pp_size ", pp, " and tp_size ", tp, " must be >= 1"));
  }
  if (world_size % (pp * tp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hybrid parallel mesh: the world size ", world_size, " is not divisible by pp_size * tp_size = ",
        pp, " * ", tp, " = ", pp * tp));
  }
  return create(world_size, rank, {world_size / (pp * tp), pp, tp}, {"dp", "pp", "tp"});
}

absl::StatusOr<int> DeviceMesh::axis(absl::string_view name) const {
  for (int i = 0; i < ndim(); ++i) {
    if (names_[i] == name) return i;
  }
  std::vector<absl::string_view> candidates(names_.begin(), names_.end());
  return absl::InvalidArgumentError(absl::StrCat("device mesh has no axis '", name, "'",
                                                 core::did_you_mean(name, candidates),
                                                 " (axes: ", absl::StrJoin(names_, ", "), ")"));
}

absl::StatusOr<int> DeviceMesh::size(absl::string_view name) const {
  COLOSSAL_ASSIGN_OR_RETURN(int a, axis(name));
  return dims_[a];
}

std::vector<int> DeviceMesh::coordinates_of(int rank) const {
  COLOSSAL_CHECK(rank >= 0 && rank < world_size_) << "rank " << rank << " of " << world_size_;
  std::vector<int> coords(dims_.size());
  for (int i = ndim() - 1; i >= 0; --i) {
    coords[i] = rank % dims_[i];
    rank /= dims_[i];
  }
  return coords;
}

int DeviceMesh::rank_of(const std::vector<int>& coords) const {
  COLOSSAL_CHECK_EQ(static_cast<int>(coords.size()), ndim());
  int rank = 0;
  for (int i = 0; i < ndim(); ++i) {
    COLOSSAL_CHECK(coords[i] >= 0 && coords[i] < dims_[i])
        << "coordinate " << coords[i] << " on axis " << names_[i] << " of size " << dims_[i];
    rank = rank * dims_[i] + coords[i];
  }
  return rank;
}

absl::StatusOr<int> DeviceMesh::coordinate(absl::string_view name) const {
  COLOSSAL_ASSIGN_OR_RETURN(int a, axis(name));
  return coords_[a];
}

std::vector<int> DeviceMesh::ranks_along(int axis, int rank) const {
  COLOSSAL_CHECK(axis >= 0 && axis < ndim()) << "axis " << axis;
  std::vector<int> coords = coordinates_of(rank < 0 ? rank_ : rank);
  std::vector<int> ranks;
  for (int i = 0; i < dims_[axis]; ++i) {
    coords[axis] = i;
    ranks.push_back(rank_of(coords));
  }
  return ranks;
}

absl::StatusOr<std::vector<int>> DeviceMesh::ranks_along(absl::string_view name) const {
  COLOSSAL_ASSIGN_OR_RETURN(int a, axis(name));
  return ranks_along(a);
}

std::vector<std::vector<int>> DeviceMesh::groups_along(int axis) const {
  std::vector<std::vector<int>> groups;
  std::vector<bool> covered(world_size_, false);
  for (int r = 0; r < world_size_; ++r) {
    if (covered[r]) continue;
    groups.push_back(ranks_along(axis, r));
    for (int m : groups.back()) covered[m] = true;
  }
  return groups;
}

absl::Status DeviceMesh::create_groups(ProcessGroup& world) {
  if (world.size() != world_size_ || world.rank() != rank_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device mesh of ", world_size_, " ranks (this is rank ", rank_,
        ") cannot split a group of ", world.size(), " ranks in which this is rank ", world.rank()));
  }
  for (int a = 0; a < ndim(); ++a) {
    const std::vector<int> ranks = ranks_along(a);
    auto g = world.new_group(ranks);
    if (!g.ok()) {
      return core::annotate(g.status(), absl::StrCat("device mesh: creating the '", names_[a],
                                                     "' group {", absl::StrJoin(ranks, ","), "}"));
    }
    groups_[a] = *g;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> DeviceMesh::group(absl::string_view name) const {
  COLOSSAL_ASSIGN_OR_RETURN(int a, axis(name));
  if (groups_[a] == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("device mesh: no '", name, "' group yet (call create_groups first)"));
  }
  return groups_[a];
}

}  // namespace colossal::comm
