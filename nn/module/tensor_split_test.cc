// Tensor-parallel pieces of parameters (TensorSplit): local shapes, the whole
// table's offsets, initial values equal to the whole parameter's there, and
// the copies between pieces and whole tensors.
#include "nn/module/tensor_split.h"

#include <vector>

#include "gtest/gtest.h"
#include "nn/module/parameter.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Stream;

// The same three parameters whole, or as piece `index` of `parts`: a fused
// q|k|v-like [6, 12] split along dim 1 in 3 blocks (column layer, Conv1D
// layout), a [8, 6] split along dim 0 (column layer, [out, in]), a [6, 4]
// split along dim 1 (row layer) and an unsplit bias with a zero tail.
ParameterTable table(int parts, int index) {
  ParameterTable t;
  const auto split = [&](int dim, int blocks = 1) {
    return parts > 1 ? TensorSplit{dim, blocks, parts, index} : TensorSplit{};
  };
  EXPECT_TRUE(t.add("qkv", {6, 12}, DType::kF32, InitRule::normal(0.02), split(1, 3)).ok());
  EXPECT_TRUE(t.add("col", {8, 6}, DType::kF32, InitRule::normal(1.0, /*zero_tail=*/6),
                    split(0)).ok());
  EXPECT_TRUE(t.add("row", {6, 4}, DType::kF32, InitRule::normal(0.5), split(1)).ok());
  EXPECT_TRUE(t.add("bias", {5}, DType::kF32, InitRule::ones()).ok());
  return t;
}

std::vector<float> values_of(const core::Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(TensorSplitTest, PiecesHaveLocalShapesAndTheWholeTablesInitOffsets) {
  const ParameterTable whole = table(1, 0);
  const ParameterTable piece = table(2, 1);
  EXPECT_EQ(piece.entries()[0].shape, (core::Shape{6, 6}));
  EXPECT_EQ(piece.entries()[1].shape, (core::Shape{4, 6}));
  EXPECT_EQ(piece.entries()[2].shape, (core::Shape{6, 2}));
  EXPECT_EQ(piece.entries()[3].shape, (core::Shape{5}));
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(piece.entries()[i].init_offset, whole.entries()[i].init_offset) << i;
    EXPECT_EQ(piece.entries()[i].global_shape, whole.entries()[i].shape) << i;
  }
  // whole_table undoes the splits: the one-process offsets.
  const ParameterTable undone = *whole_table(piece);
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(undone.entries()[i].offset, whole.entries()[i].offset) << i;
    EXPECT_EQ(undone.entries()[i].shape, whole.entries()[i].shape) << i;
    EXPECT_FALSE(undone.entries()[i].split.active()) << i;
  }
}

TEST(TensorSplitTest, PiecesInitialiseToTheWholeParametersValuesAndReassemble) {
  ParameterStore whole = *ParameterStore::create(table(1, 0), Stream::cpu());
  ASSERT_TRUE(whole.initialize(/*seed=*/7).ok());
  for (int parts : {2, 3}) {
    std::vector<ParameterStore> pieces;
    for (int r = 0; r < parts; ++r) {
      // col's 8 rows and row's 4 columns do not split in 3: only the others.
      if (parts == 3) continue;
      pieces.push_back(*ParameterStore::create(table(parts, r), Stream::cpu()));
      ASSERT_TRUE(pieces.back().initialize(7).ok());
    }
    if (pieces.empty()) continue;
    for (size_t i = 0; i < whole.parameters().size(); ++i) {
      const ParameterEntry& e = pieces[0].table().entries()[i];
      core::Tensor rebuilt = *core::Tensor::empty(e.global_shape, DType::kF32, Stream::cpu());
      for (int64_t k = 0; k < rebuilt.numel(); ++k) rebuilt.data<float>()[k] = -999.0f;  // poison
      for (int r = 0; r < parts; ++r) {
        const ParameterEntry& er = pieces[r].table().entries()[i];
        // The piece holds what the whole parameter has there.
        core::Tensor expect = *core::Tensor::empty(er.shape, DType::kF32, Stream::cpu());
        ASSERT_TRUE(copy_piece_from_whole(er, whole.parameters()[i].value, expect).ok());
        EXPECT_EQ(values_of(pieces[r].parameters()[i].value), values_of(expect))
            << er.name << " piece " << r;
        ASSERT_TRUE(copy_piece_into_whole(er, pieces[r].parameters()[i].value, rebuilt).ok());
      }
      EXPECT_EQ(values_of(rebuilt), values_of(whole.parameters()[i].value)) << e.name;
    }
  }
}

TEST(TensorSplitTest, FusedBlocksSplitEachBlock) {
  // qkv [6, 12] in 3 blocks of 4 columns, piece 1 of 2: columns 2-3, 6-7, 10-11.
  const ParameterTable t = table(2, 1);
  const ParameterEntry& e = t.entries()[0];
  const std::vector<SplitRun> runs = split_runs(e);
  ASSERT_EQ(runs.size(), 18u);
  EXPECT_EQ(runs[0].local, 0);
  EXPECT_EQ(runs[0].global, 2);
  EXPECT_EQ(runs[0].count, 2);
  EXPECT_EQ(runs[1].global, 6);
  EXPECT_EQ(runs[2].global, 10);
  EXPECT_EQ(runs[3].global, 14);  // row 1
  EXPECT_EQ(runs[3].local, 6);
}

// piece_of_whole: a view of the whole tensor for a piece that is one run of
// it (col: rows split), a copy otherwise (qkv, row: columns split); both
// hold what copy_piece_from_whole copies.
TEST(TensorSplitTest, PieceOfWholeViewsContiguousPiecesAndCopiesTheRest) {
  ParameterStore whole = *ParameterStore::create(table(1, 0), Stream::cpu());
  ASSERT_TRUE(whole.initialize(/*seed=*/3).ok());
  const ParameterTable pieces = table(2, 1);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ParameterEntry& e = pieces.entries()[i];
    const core::Tensor& w = whole.parameters()[i].value;
    absl::StatusOr<core::Tensor> piece = piece_of_whole(e, w);
    ASSERT_TRUE(piece.ok()) << piece.status();
    EXPECT_EQ(piece->shape(), e.shape) << e.name;
    core::Tensor expect = *core::Tensor::empty(e.shape, DType::kF32, Stream::cpu());
    ASSERT_TRUE(copy_piece_from_whole(e, w, expect).ok());
    EXPECT_EQ(values_of(*piece), values_of(expect)) << e.name;
    const char* at = static_cast<const char*>(piece->raw_data());
    const char* base = static_cast<const char*>(w.raw_data());
    const bool view = at >= base && at < base + w.nbytes();
    EXPECT_EQ(view, e.name == "col" || e.name == "bias") << e.name;
  }
  core::Tensor small = *core::Tensor::empty({3}, DType::kF32, Stream::cpu());
  EXPECT_EQ(piece_of_whole(pieces.entries()[1], small).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorSplitTest, SplitsThatDoNotDivideAreRefused) {
  ParameterTable t;
  const absl::Status s = t.add("w", {6, 10}, DType::kF32, InitRule::zeros(), {1, 3, 2, 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("\"w\""), absl::string_view::npos) << s;
  core::Tensor small = *core::Tensor::empty({3}, DType::kF32, Stream::cpu());
  const ParameterTable pieces = table(2, 0);
  const ParameterEntry& e = pieces.entries()[0];
  EXPECT_EQ(copy_piece_from_whole(e, small, small).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colossal::nn
