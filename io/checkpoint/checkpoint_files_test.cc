// io/checkpoint's files without any model: tensors written with their own
// (leading-element) shapes and read back with zero fill, validation errors
// that name the tensor, trainer-state sections, optimizer files.
// (GPT-2 training checkpoints end to end: nn/train/checkpoint_test.cc.)
#include "io/checkpoint/checkpoint.h"

#include <stdlib.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace colossal::io {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;

Tensor Filled(const core::Shape& shape, float first) {
  Tensor t = *Tensor::empty(shape, DType::kF32, Stream::cpu());
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = first + 0.5f * static_cast<float>(i);
  return t;
}

TEST(CheckpointFiles, TensorsSectionsAndOptimizerRoundTrip) {
  // Under TEST_TMPDIR (Bazel), or a new folder under /tmp (a bundle run).
  const char* base = std::getenv("TEST_TMPDIR");
  char pattern[] = "/tmp/checkpoint_files_test.XXXXXX";
  const std::string root =
      std::string(base != nullptr ? base : ::mkdtemp(pattern)) + "/files";
  CheckpointToSave save;
  save.step = 4;
  const Tensor w = Filled({3, 2}, 1.0f);  // written as [2, 2]: its first 4 elements
  const Tensor b = Filled({2}, -3.0f);
  save.model = {{"w", w, core::Shape{2, 2}}, {"b", b, b.shape()}};
  save.config_json = "{\"torch_dtype\": \"float32\"}\n";
  OptimizerFiles opt{{{"state.w.exp_avg", Filled({5}, 7.0f)}}, "{\"kind\": 1}"};
  save.optimizer = &opt;
  save.trainer.sections["lr_scheduler"] = "{\"last_step\":17}";
  save.trainer.rng = core::RngState{5, 6};
  absl::StatusOr<std::string> dir = SaveCheckpoint(root, save);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*ResolveCheckpoint(root), *dir);
  EXPECT_EQ(*ReadCheckpointDType(*dir), DType::kF32);
  // transformers 5 names the weights' dtype "dtype".
  save.step = 5;
  save.config_json = "{\"dtype\": \"bfloat16\"}\n";
  absl::StatusOr<std::string> v5 = SaveCheckpoint(root, save);
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_EQ(*ReadCheckpointDType(*v5), DType::kBF16);
  save.step = 6;
  save.config_json = "{\"vocab_size\": 3}\n";
  absl::StatusOr<std::string> none = SaveCheckpoint(root, save);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(ReadCheckpointDType(*none).status().code(), absl::StatusCode::kInvalidArgument);
  save.step = 4;
  save.config_json = "{\"torch_dtype\": \"float32\"}\n";

  Tensor w2 = Filled({3, 2}, 100.0f), b2 = Filled({2}, 100.0f);  // poisoned
  ASSERT_TRUE(LoadModelTensors(*dir, {{"w", DType::kF32, {2, 2}, w2}, {"b", DType::kF32, {2}, b2}}).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w2.data<float>()[i], w.data<float>()[i]);
  EXPECT_EQ(w2.data<float>()[4], 0.0f);  // past the written shape: zero
  EXPECT_EQ(w2.data<float>()[5], 0.0f);
  EXPECT_EQ(b2.data<float>()[1], b.data<float>()[1]);

  absl::Status s = LoadModelTensors(*dir, {{"w", DType::kF32, {2, 2}, w2}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "unexpected tensor 'b'")) << s;
  s = LoadModelTensors(*dir, {{"w", DType::kF32, {4, 1}, w2}, {"b", DType::kF32, {2}, b2}});
  EXPECT_TRUE(absl::StrContains(s.message(), "'w' has shape [2, 2], the model wants [4, 1]")) << s;
  s = LoadModelTensors(*dir, {{"x", DType::kF32, {2}, b2}, {"b", DType::kF32, {2}, b2}});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;

  absl::StatusOr<OptimizerFiles> o = LoadOptimizerFiles(*dir);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->meta_json, "{\"kind\": 1}");
  EXPECT_EQ(o->tensors.at("state.w.exp_avg").data<float>()[4], 9.0f);

  absl::StatusOr<TrainerState> t = LoadTrainerState(*dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->step, 4);
  EXPECT_EQ(t->sections.at("lr_scheduler"), "{\"last_step\":17}");
  EXPECT_EQ(t->rng->offset, 6u);
  EXPECT_FALSE(t->data_loader.has_value());
  EXPECT_FALSE(TrainerStateFromJson("{\"step\": 1, \"lr_scheduler\": 3}").ok());
  EXPECT_FALSE(TrainerStateFromJson("{\"step\": 1, \"x\": {\"y\": [1]}}").ok());
}

}  // namespace
}  // namespace colossal::io
