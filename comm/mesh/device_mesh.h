// colossal::comm — DeviceMesh: the world's ranks as an N-d grid of named axes.
//
// Hybrid parallelism splits the world into data-, pipeline- and
// tensor-parallel groups. Colossal-AI's HybridParallelPlugin builds
// ProcessGroupMesh(dp, pp, tp) and numbers ranks in C order (numpy's
// unravel_index): the last axis, tp, varies fastest, then pp, then dp. So
// with dp = pp = tp = 2 over 8 ranks:
//   tp groups {0,1} {2,3} {4,5} {6,7}   (neighbouring ranks: the fastest links)
//   pp groups {0,2} {1,3} {4,6} {5,7}
//   dp groups {0,4} {1,5} {2,6} {3,7}
// DeviceMesh keeps that numbering for any shape and axis names.
//
//   COLOSSAL_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::hybrid_parallel(8, rank, /*pp=*/2, /*tp=*/2));
//   mesh.coordinate("tp");                     // this rank's tp index
//   mesh.ranks_along("dp");                    // {rank % 4, rank % 4 + 4}
//   COLOSSAL_RETURN_IF_ERROR(mesh.create_groups(*world_pg));  // one subgroup per axis
//   COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> tp, mesh.group("tp"));
//
// Rank arithmetic needs no communication; create_groups() is collective: every
// rank of the world calls it (each joins the groups it belongs to, axis by
// axis, in axis order).
#ifndef COLOSSAL_COMM_MESH_DEVICE_MESH_H_
#define COLOSSAL_COMM_MESH_DEVICE_MESH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/process_group/process_group.h"

namespace colossal::comm {

class DeviceMesh {
 public:
  // A mesh of `dims` (their product must be world_size) with one distinct
  // name per axis; `rank` is this process's world rank. Errors: sizes that do
  // not multiply to the world size (naming them), a non-positive size, a rank
  // out of range, repeated or empty names.
  static absl::StatusOr<DeviceMesh> create(int world_size, int rank, std::vector<int> dims,
                                           std::vector<std::string> names);
  // Colossal-AI's hybrid parallel mesh: axes ("dp", "pp", "tp") with
  // dp = world_size / (pp * tp). Errors: world_size not divisible by pp * tp.
  static absl::StatusOr<DeviceMesh> hybrid_parallel(int world_size, int rank, int pp, int tp);

  int ndim() const { return static_cast<int>(dims_.size()); }
  const std::vector<int>& dims() const { return dims_; }
  const std::vector<std::string>& names() const { return names_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // The axis called `name`; InvalidArgumentError with a suggestion otherwise.
  absl::StatusOr<int> axis(absl::string_view name) const;
  // Size of an axis by name (1 for an unknown name is not offered: errors).
  absl::StatusOr<int> size(absl::string_view name) const;

  // C-order conversions; coords.size() == ndim(), each in range (aborts
  // otherwise: a bug).
  std::vector<int> coordinates_of(int rank) const;
  int rank_of(const std::vector<int>& coords) const;
  // This rank's index along `axis` / the axis called `name`.
  int coordinate(int axis) const { return coords_[axis]; }
  absl::StatusOr<int> coordinate(absl::string_view name) const;

  // The ranks sharing every coordinate but `axis` with `rank` (default: this
  // rank), in order along the axis: the group this rank joins for that axis.
  std::vector<int> ranks_along(int axis, int rank = -1) const;
  absl::StatusOr<std::vector<int>> ranks_along(absl::string_view name) const;
  // Every group along `axis`, ordered by their smallest rank.
  std::vector<std::vector<int>> groups_along(int axis) const;

  // Creates this rank's subgroup of `world` for every axis (world must be the
  // group the mesh numbers: world.size() == world_size(), world.rank() ==
  // rank()). Collective over `world`.
  absl::Status create_groups(ProcessGroup& world);
  // The subgroup of axis `name` (after create_groups). FailedPreconditionError
  // before it.
  absl::StatusOr<std::shared_ptr<ProcessGroup>> group(absl::string_view name) const;

 private:
  DeviceMesh(int world_size, int rank, std::vector<int> dims, std::vector<std::string> names);

  int world_size_;
  int rank_;
  std::vector<int> dims_;
  std::vector<std::string> names_;
  std::vector<int> coords_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;  // per axis, after create_groups
};

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_MESH_DEVICE_MESH_H_
