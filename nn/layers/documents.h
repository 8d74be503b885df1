// colossal::nn — packed documents: rows of [B, T] tokens that each hold one or
// more documents back to back (conversations packed by the data loader). A
// document attends to itself only and its positions count from 0, as if it
// had a row of its own (transformers' padding-free packing, flash
// attention's varlen layout). A row's first document may be the tail of one
// that began in an earlier row: it starts at position 0 all the same.
//
// Documents come from each token's position in its document (int32 [B, T],
// the data loader's batch.positions): a document starts at every row's first
// token and wherever the position is 0; every other position is the one before
// it plus 1. From them, the varlen layout kernels/attention takes: cu_seqlens,
// the first row (of the B * T) of each document and then B * T.
//
//   COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<const Documents> docs,
//                             Documents::from_positions(ctx, host_positions));   // [B, T] int32
//   model.set_documents(docs);   // the next forwards and backwards attend within them
#ifndef COLOSSAL_NN_LAYERS_DOCUMENTS_H_
#define COLOSSAL_NN_LAYERS_DOCUMENTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"

namespace colossal::nn {

struct Documents {
  // int32 [B, T] position of each token in its document, on ctx's device.
  core::Tensor positions;
  // int32 [num_documents + 1] on ctx's device, and the same on the host.
  core::Tensor cu_seqlens;
  std::vector<int32_t> cu_seqlens_host;
  int64_t batch = 0, seq = 0;
  int64_t max_seqlen = 0;  // the longest document's tokens
  int64_t num_documents() const { return static_cast<int64_t>(cu_seqlens_host.size()) - 1; }

  // From host int32 [B, T] positions (copied to ctx's device on its compute
  // stream). InvalidArgument naming the row and position for a position that
  // is neither 0 nor the previous one plus 1, a first position in a row that
  // is not 0, a tensor that is not int32 [B, T] on the host, or B * T >= 2^31.
  static absl::StatusOr<std::shared_ptr<const Documents>> from_positions(core::Context& ctx,
                                                                         const core::Tensor& positions);

 private:
  core::Tensor host_positions_, host_cu_seqlens_;  // the copies' sources, kept while they may run
};

// The documents the next forwards and backwards of a model's attention layers
// use, one per model, shared by its layers (null: each row is one sequence).
// Whoever runs the model sets it before each micro-batch's forward and again
// before its backward (activation checkpointing runs the forward again there).
struct DocumentsSlot {
  std::shared_ptr<const Documents> current;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_DOCUMENTS_H_
