// io/checkpoint's files without any model: tensors written with their own
// (leading-element) shapes and read back with zero fill, validation errors
// that name the tensor, trainer-state sections, optimizer files.
// (GPT-2 training checkpoints end to end: nn/train/checkpoint_test.cc.)
#include "io/checkpoint/checkpoint.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/common/atomic_file.h"
#include "io/common/file_util.h"
#include "io/safetensors/writer.h"

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

// A folder for one test's checkpoints: under TEST_TMPDIR (Bazel), or a new
// folder under /tmp (a bundle run).
std::string TestRoot(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  char pattern[] = "/tmp/checkpoint_files_test.XXXXXX";
  return std::string(base != nullptr ? base : ::mkdtemp(pattern)) + "/" + name;
}

TEST(CheckpointFiles, TensorsSectionsAndOptimizerRoundTrip) {
  const std::string root = TestRoot("files");
  CheckpointToSave save;
  save.step = 4;
  const Tensor w = Filled({3, 2}, 1.0f);  // written as [2, 2]: its first 4 elements
  const Tensor b = Filled({2}, -3.0f);
  save.model = {{"w", w, core::Shape{2, 2}}, {"b", b, b.shape()}};
  save.config_json = "{\"torch_dtype\": \"float32\"}\n";
  OptimizerFiles opt{{{"state.w.exp_avg", Filled({5}, 7.0f)}}, "{\"kind\": 1}", {}};
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
  // A file inside the step folder is named as a file, not looked into.
  absl::StatusOr<std::string> file = ResolveCheckpoint(*dir + "/model.safetensors");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(file.status().message(), "model.safetensors' is a file")) << file.status();

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

// A diverged model (NaN or inf in a tensor, in any floating dtype) is not
// saved: nothing is published, `latest` and the kept step folders stay.

// Streamed tensors: a writer that sends each tensor in pieces, out of order,
// with a padded tail past the shape; counts its calls.
struct PieceWriter {
  std::vector<Tensor> values;  // tensor i's values (numel >= its layout's)
  int calls = 0;
  absl::Status operator()(TensorSink& sink) {
    ++calls;
    for (size_t i = values.size(); i-- > 0;) {
      const float* v = values[i].data<float>();
      const int64_t n = values[i].numel(), half = n / 2;
      sink.write(i, half, v + half, n - half);
      sink.write(i, 0, v, half);
    }
    return absl::OkStatus();
  }
};

// A streamed model and optimizer write the same files as held ones, and the
// loaded optimizer tensors view the file's mapping instead of copying it.
TEST(CheckpointFiles, StreamedModelAndOptimizerEqualHeldOnes) {
  const Tensor w = Filled({3, 2}, 1.0f), b = Filled({2}, -3.0f), m = Filled({5}, 7.0f);
  CheckpointToSave held;
  held.step = 1;
  held.model = {{"w", w, core::Shape{2, 2}}, {"b", b, b.shape()}};
  held.config_json = "{}\n";
  OptimizerFiles held_opt{{{"state.w.exp_avg", m}}, "{}", {}};
  held.optimizer = &held_opt;
  absl::StatusOr<std::string> a = SaveCheckpoint(TestRoot("held"), held);
  ASSERT_TRUE(a.ok()) << a.status();

  CheckpointToSave streamed;
  streamed.step = 1;
  streamed.config_json = held.config_json;
  auto model = std::make_shared<PieceWriter>(PieceWriter{{w, b}});
  streamed.streamed_model = {{{"w", DType::kF32, {2, 2}}, {"b", DType::kF32, {2}}},
                             [model](TensorSink& sink) { return (*model)(sink); }};
  auto moments = std::make_shared<PieceWriter>(PieceWriter{{m}});
  OptimizerFiles opt{{}, "{}", {{{"state.w.exp_avg", DType::kF32, {5}}}, [moments](TensorSink& sink) { return (*moments)(sink); }}};
  streamed.optimizer = &opt;
  absl::StatusOr<std::string> c = SaveCheckpoint(TestRoot("streamed"), streamed);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(model->calls, 1);
  EXPECT_EQ(moments->calls, 1);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    absl::StatusOr<std::string> x = ReadFileToString(*a + "/" + file), y = ReadFileToString(*c + "/" + file);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(*x, *y) << file;
  }
  absl::StatusOr<OptimizerFiles> o = LoadOptimizerFiles(*c);
  ASSERT_TRUE(o.ok()) << o.status();
  const Tensor& loaded = o->tensors.at("state.w.exp_avg");
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(loaded.data<float>()[i], m.data<float>()[i]);
  EXPECT_TRUE(absl::StrContains(loaded.storage()->allocator().name(), "mapped(")) << loaded.storage()->allocator().name();
}

// Mapped model tensors: views of the file where the tensor fills its result,
// a zero-padded copy where the result is larger; validated as loads are.
TEST(CheckpointFiles, MappedModelTensorsViewTheFileAndPadCopies) {
  CheckpointToSave save;
  save.step = 2;
  const Tensor w = Filled({3, 2}, 1.0f), b = Filled({2}, -3.0f);
  save.model = {{"w", w, core::Shape{2, 2}}, {"b", b, b.shape()}};
  save.config_json = "{}\n";
  absl::StatusOr<std::string> dir = SaveCheckpoint(TestRoot("mapped"), save);
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<std::vector<Tensor>> got =
      MapModelTensors(*dir, {{"w", DType::kF32, {2, 2}, {3, 2}}, {"b", DType::kF32, {2}, {2}}});
  ASSERT_TRUE(got.ok()) << got.status();
  const Tensor& pw = (*got)[0];
  const Tensor& pb = (*got)[1];
  EXPECT_EQ(pw.shape(), (core::Shape{3, 2}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pw.data<float>()[i], w.data<float>()[i]);
  EXPECT_EQ(pw.data<float>()[4], 0.0f);
  EXPECT_EQ(pw.data<float>()[5], 0.0f);
  EXPECT_FALSE(absl::StrContains(pw.storage()->allocator().name(), "mapped("));
  EXPECT_EQ(pb.data<float>()[1], b.data<float>()[1]);
  EXPECT_TRUE(absl::StrContains(pb.storage()->allocator().name(), "mapped(")) << pb.storage()->allocator().name();
  absl::StatusOr<std::vector<Tensor>> bad =
      MapModelTensors(*dir, {{"w", DType::kF32, {4, 1}, {4, 1}}, {"b", DType::kF32, {2}, {2}}});
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "'w' has shape [2, 2], the model wants [4, 1]")) << bad.status();
}

// A streamed model holding NaN is not saved, and the writers are still
// called once each when the save fails before them (here: the root is a
// file), so other ranks' collectives inside them complete.
TEST(CheckpointFiles, StreamedSaveFailuresStillCallEveryWriterOnce) {
  Tensor w = Filled({4}, 1.0f);
  w.data<float>()[2] = std::nanf("");
  auto model = std::make_shared<PieceWriter>(PieceWriter{{w}});
  auto moments = std::make_shared<PieceWriter>(PieceWriter{{Filled({4}, 0.0f)}});
  CheckpointToSave save;
  save.step = 3;
  save.config_json = "{}\n";
  save.streamed_model = {{{"w", DType::kF32, {4}}}, [model](TensorSink& sink) { return (*model)(sink); }};
  OptimizerFiles opt{{}, "{}", {{{"state.w.exp_avg", DType::kF32, {4}}}, [moments](TensorSink& sink) { return (*moments)(sink); }}};
  save.optimizer = &opt;
  const std::string root = TestRoot("nan");
  absl::StatusOr<std::string> dir = SaveCheckpoint(root, save);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(dir.status().message(), "model tensor 'w' holds NaN or inf (element 2)")) << dir.status();
  EXPECT_EQ(model->calls, 1);
  EXPECT_EQ(moments->calls, 1);
  EXPECT_FALSE(ResolveCheckpoint(root).ok());  // nothing published

  const std::string file = TestRoot("a_file");
  ASSERT_TRUE(WriteFileAtomically(file, "x").ok());
  w.data<float>()[2] = 0.0f;
  dir = SaveCheckpoint(file, save);
  EXPECT_FALSE(dir.ok());
  EXPECT_EQ(model->calls, 2);
  EXPECT_EQ(moments->calls, 2);
}

TEST(CheckpointFiles, NonFiniteModelIsNotSavedAndKeepsTheLastGoodSteps) {
  const std::string root = TestRoot("diverged");
  CheckpointToSave save;
  save.config_json = "{\"torch_dtype\": \"float32\"}\n";
  const Tensor good = Filled({4}, 1.0f);
  save.model = {{"w", good, good.shape()}};
  for (int64_t step : {1, 2}) {
    save.step = step;
    ASSERT_TRUE(SaveCheckpoint(root, save, {.keep_last = 2}).ok());
  }
  const std::string latest = *ResolveCheckpoint(root);
  struct Case {
    DType dtype;
    uint64_t bits;  // a NaN or inf of that dtype
  };
  for (const Case& c : {Case{DType::kF32, 0x7FC00000u}, Case{DType::kF32, 0xFF800000u},
                        Case{DType::kBF16, 0x7F80u}, Case{DType::kF16, 0xFE00u},
                        Case{DType::kF64, 0x7FF8000000000000ull}}) {
    Tensor t = *Tensor::empty({3}, c.dtype, Stream::cpu());
    std::memset(t.raw_data(), 0, t.nbytes());
    std::memcpy(static_cast<char*>(t.raw_data()) + 2 * core::dtype_size(c.dtype), &c.bits,
                core::dtype_size(c.dtype));
    save.step = 3;
    save.model = {{"w", good, good.shape()}, {"h.bad", t, t.shape()}};
    absl::StatusOr<std::string> dir = SaveCheckpoint(root, save, {.keep_last = 2});
    ASSERT_FALSE(dir.ok()) << core::dtype_name(c.dtype);
    EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(dir.status().message(), "'h.bad' holds NaN or inf (element 2)"))
        << dir.status();
    EXPECT_EQ(*ResolveCheckpoint(root), latest);
    EXPECT_TRUE(ResolveCheckpoint(root + "/step_000001").ok());  // not pruned
  }
}

// Step 1 of a float32 model of one tensor "w" of four ones.
CheckpointToSave OneTensorStep() {
  CheckpointToSave save;
  save.step = 1;
  save.config_json = "{\"torch_dtype\": \"float32\"}\n";
  const Tensor w = Filled({4}, 1.0f);
  save.model = {{"w", w, w.shape()}};
  return save;
}

// files_to_copy land in the step directory under their names, byte for byte
// (a tokenizer's). A file that cannot be read, or one named as a file the
// checkpoint writes itself, fails the save naming it, and nothing is
// published.
TEST(CheckpointFiles, CopiedFilesArriveWholeAndBadOnesFailTheSave) {
  const std::string root = TestRoot("copied");
  const std::string src = TestRoot("copied_src");
  ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
  std::string bytes;
  for (int i = 0; i < 5000; ++i) bytes.push_back(static_cast<char>(i * 7 % 251));
  ASSERT_TRUE(WriteFileAtomically(src + "/tokenizer.model", bytes).ok());
  ASSERT_TRUE(WriteFileAtomically(src + "/tokenizer_config.json", "{\"bos_token\": \"<s>\"}").ok());
  CheckpointToSave save = OneTensorStep();
  save.files_to_copy = {src + "/tokenizer.model", src + "/tokenizer_config.json"};
  absl::StatusOr<std::string> dir = SaveCheckpoint(root, save);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*ReadFileToString(*dir + "/tokenizer.model"), bytes);
  EXPECT_EQ(*ReadFileToString(*dir + "/tokenizer_config.json"), "{\"bos_token\": \"<s>\"}");
  ASSERT_TRUE(WriteFileAtomically(src + "/config.json", "{}").ok());
  for (const std::string& bad : {src + "/missing.json", src + "/config.json"}) {
    save.step = 2;
    save.files_to_copy = {src + "/tokenizer.model", bad};
    absl::StatusOr<std::string> failed = SaveCheckpoint(root, save);
    ASSERT_FALSE(failed.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(failed.status().message(), bad)) << failed.status();
    EXPECT_EQ(*ResolveCheckpoint(root), *dir);
  }
}

// A model file written by an older version, which saved diverged runs: the
// load refuses it naming the tensor and its file, before copying anything.
TEST(CheckpointFiles, NonFiniteModelIsRefusedAtLoadNamingTensorAndFile) {
  const std::string root = TestRoot("load_nan");
  const CheckpointToSave save = OneTensorStep();
  absl::StatusOr<std::string> dir = SaveCheckpoint(root, save);
  ASSERT_TRUE(dir.ok()) << dir.status();
  for (float bad : {std::nanf(""), -INFINITY}) {
    // What the older save wrote: the same file, one element not finite.
    Tensor nan = Filled({4}, 1.0f);
    nan.data<float>()[3] = bad;
    const SafetensorsEntry entry{"w", "F32", {4}, nan.raw_data(), nan.nbytes()};
    ASSERT_TRUE(WriteSafetensors(*dir + "/model.safetensors", {&entry, 1}, {{"format", "pt"}}).ok());
    Tensor dst = Filled({4}, 100.0f);  // poisoned: must stay as it is
    absl::Status s = LoadModelTensors(*dir, {{"w", DType::kF32, {4}, dst}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(
        s.message(), absl::StrCat("tensor 'w' in '", *dir, "/model.safetensors' holds NaN or inf (element 3)")))
        << s;
    EXPECT_EQ(dst.data<float>()[0], 100.0f);
  }
}

// Optimizer state holding NaN or inf (what a diverged run's moments hold) is
// refused at load, naming the file and the tensor.
TEST(CheckpointFiles, NonFiniteOptimizerStateIsRefusedAtLoad) {
  const std::string root = TestRoot("optimizer_nan");
  CheckpointToSave save = OneTensorStep();
  OptimizerFiles files;
  files.meta_json = "{}";
  Tensor m = Filled({4}, 0.5f);
  m.data<float>()[1] = INFINITY;
  files.tensors.emplace("state.w.exp_avg", m);
  files.tensors.emplace("state.w.exp_avg_sq", Filled({4}, 0.25f));
  save.optimizer = &files;
  absl::StatusOr<std::string> dir = SaveCheckpoint(root, save);
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<OptimizerFiles> o = LoadOptimizerFiles(*dir);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(o.status().message(), absl::StrCat("'", *dir, "/optimizer.safetensors': tensor "
                                                                   "'state.w.exp_avg' holds NaN or inf (element 1)")))
      << o.status();
}

// trainer_state.json with a step no run reaches, or a data loader state out
// of range, is refused naming the file and the key; saves refuse such steps.
TEST(CheckpointFiles, TrainerStateOutOfRangeIsRefusedNamingFileAndKey) {
  for (const char* step : {"-1", "1099511627777", "100000000000000", "18446744073709551615", "2.5", "1e14"}) {
    absl::StatusOr<TrainerState> t = TrainerStateFromJson(absl::StrCat("{\"step\": ", step, "}"));
    ASSERT_FALSE(t.ok()) << step;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(t.status().message(), "trainer_state.json: 'step' must be")) << t.status();
  }
  EXPECT_EQ(TrainerStateFromJson("{\"step\": 1099511627776}")->step, kMaxCheckpointStep);

  const std::string root = TestRoot("trainer_range");
  CheckpointToSave save;
  save.config_json = "{\"torch_dtype\": \"float32\"}\n";
  const Tensor w = Filled({4}, 1.0f);
  save.model = {{"w", w, w.shape()}};
  save.step = kMaxCheckpointStep + 1;
  absl::StatusOr<std::string> refused = SaveCheckpoint(root, save);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "step must be in [0, 2^40")) << refused.status();

  save.step = 2;
  DataLoaderState loader;
  loader.batch_size = 0;  // what a hand edit or a broken tool leaves
  loader.seq_len = 8;
  loader.num_windows = 10;
  save.trainer.data_loader = loader;
  absl::StatusOr<std::string> dir = SaveCheckpoint(root, save);
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<TrainerState> t = LoadTrainerState(*dir);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(t.status().message(), absl::StrCat("'", *dir, "/trainer_state.json'")))
      << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "'data_loader': data loader state: 'batch_size' must be an "
                                                      "integer >= 1, got 0"))
      << t.status();
}

}  // namespace
}  // namespace colossal::io
