// colossal::nn — moving between a tensor-parallel piece of a parameter and the
// whole parameter (ParameterEntry::split, nn/module/parameter.h), on the host.
//
// A plugin that splits the model (hybrid_parallel) gathers the pieces of every
// rank into the whole tensors for a checkpoint, and cuts its own piece out of
// a whole checkpoint when loading, so checkpoints look the same at any split.
//
//   ParameterTable whole = whole_table(model.table());     // one process's table
//   COLOSSAL_RETURN_IF_ERROR(copy_piece_into_whole(entry_of_rank_r, piece_r, whole_tensor));
//   COLOSSAL_RETURN_IF_ERROR(copy_piece_from_whole(entry, whole_tensor, my_piece));
#ifndef COLOSSAL_NN_MODULE_TENSOR_SPLIT_H_
#define COLOSSAL_NN_MODULE_TENSOR_SPLIT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor/tensor.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

// `table` with every split undone: the same names, order, dtypes and init
// rules with the whole shapes, so offsets and init offsets are those one
// process declares.
absl::StatusOr<ParameterTable> whole_table(const ParameterTable& table);

// `entry`'s piece (entry.shape) of `whole` (entry.global_shape) into `piece`,
// and the reverse. Host tensors of entry.dtype (contiguous); element counts
// are checked (InvalidArgument naming the parameter). Unsplit entries copy
// everything.
absl::Status copy_piece_from_whole(const ParameterEntry& entry, const core::Tensor& whole,
                                   const core::Tensor& piece);
absl::Status copy_piece_into_whole(const ParameterEntry& entry, const core::Tensor& piece,
                                   const core::Tensor& whole);

// `entry`'s piece of `whole` (a host tensor of entry.global_shape; its
// dtype is the piece's): a view of `whole` where the piece is one contiguous
// run of it (a split of the first dimension, e.g. a column-parallel weight),
// else a new host tensor it is copied into. Errors as copy_piece_from_whole.
absl::StatusOr<core::Tensor> piece_of_whole(const ParameterEntry& entry, const core::Tensor& whole);

// `entry` as tensor-parallel rank `index` of the same split holds it.
ParameterEntry entry_of_part(const ParameterEntry& entry, int index);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODULE_TENSOR_SPLIT_H_
