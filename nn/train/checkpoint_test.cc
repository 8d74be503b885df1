#include "nn/models/gpt2/gpt2.h"
#include "nn/models/gpt2/hugging_face.h"
#include "nn/train/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/checkpoint/step_dirs.h"
#include "io/common/atomic_file.h"
#include "io/common/file_util.h"
#include "io/safetensors/sharded.h"
#include "io/safetensors/writer.h"
#include "nlohmann/json.hpp"

namespace colossal::nn {
namespace {

using io::BeginStepDir;
using io::DataLoaderState;
using io::ReadFileToString;
using io::RemoveTree;
using io::ResolveCheckpoint;
using io::SafetensorsEntry;
using io::ListStepDirs;
using io::SafetensorsTensor;
using io::ShardedSafetensors;
using io::WriteFileAtomically;
using io::WriteSafetensors;

using core::DType;
using core::Stream;
using core::Tensor;

std::string MakeTestDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/ckpt_",
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  (void)RemoveTree(dir);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

nn::GPT2Config TinyConfig() {
  nn::GPT2Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.vocab_size = 11;
  c.max_seq_len = 4;
  c.padded_vocab_multiple = 8;  // 11 -> 16 rows
  return c;
}

std::unique_ptr<nn::GPT2> MakeModel(const nn::GPT2Config& c, uint64_t seed) {
  absl::StatusOr<std::unique_ptr<nn::GPT2>> m = nn::GPT2::create(c, DType::kF32, Stream::cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->init(seed).ok());
  return *std::move(m);
}

std::vector<uint8_t> Bytes(const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  if (!out.empty()) std::memcpy(out.data(), t.raw_data(), out.size());
  return out;
}

// An Adam-like state dict for `store`: exp_avg, exp_avg_sq and an int64 step.
nn::OptimizerStateDict MakeOptimizerState(const nn::ParameterStore& store) {
  nn::OptimizerStateDict sd;
  sd.meta.type = "adamw";
  nn::GroupState g;
  g.hyper.lr = 6e-4;
  g.hyper.weight_decay = 0.1;
  g.hyper.beta2 = 0.95;
  float v = 0.25f;
  for (const nn::Parameter& p : store.parameters()) {
    g.params.push_back(p.name);
    for (const char* s : {"exp_avg", "exp_avg_sq"}) {
      Tensor t = *Tensor::empty(p.value.shape(), DType::kF32, Stream::cpu());
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (v += 0.37f);
      sd.tensors[nn::state_key(p.name, s)] = t;
    }
    Tensor step = *Tensor::empty(core::Shape(), DType::kI64, Stream::cpu());
    *step.data<int64_t>() = 42;
    sd.tensors[nn::state_key(p.name, "step")] = step;
  }
  sd.meta.groups.push_back(g);
  return sd;
}

TrainerState MakeTrainerState() {
  TrainerState t;
  t.lr_scheduler = nn::LrSchedulerState{17};
  t.loss_scaler = nn::LossScalerState{1024.0f, 3, 1};
  t.rng = core::RngState{1337, 987654321};
  DataLoaderState d;
  d.epoch = 2;
  d.batch = 5;
  d.seed = 9;
  d.batch_size = 4;
  d.seq_len = 64;
  d.world_size = 2;
  d.num_windows = 1000;
  t.data_loader = d;
  return t;
}

TEST(Checkpoint, UsageExampleRoundTripIsBitExact) {
  const std::string root = MakeTestDir() + "/ckpt";
  const nn::GPT2Config config = TinyConfig();
  std::unique_ptr<nn::GPT2> model = MakeModel(config, 7);
  const nn::OptimizerStateDict opt = MakeOptimizerState(model->store());

  CheckpointToSave save;
  save.step = 100;
  save.architecture = model.get();
  save.model = &model->store();
  save.optimizer = &opt;
  save.trainer = MakeTrainerState();
  absl::StatusOr<std::string> dir = SaveCheckpoint(root, save, {.keep_last = 3});
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, root + "/step_000100");
  EXPECT_EQ(*ReadFileToString(root + "/latest"), "step_000100\n");
  for (const char* f : {"model.safetensors", "config.json", "optimizer.safetensors", "optimizer.json",
                        "trainer_state.json"}) {
    EXPECT_TRUE(Exists(*dir + "/" + f)) << f;
  }

  // Load into a differently initialised model whose padding rows are dirty.
  std::unique_ptr<nn::GPT2> loaded = MakeModel(config, 99);
  Tensor flat = loaded->store().flat_values(DType::kF32);
  for (int64_t i = 0; i < flat.numel(); ++i) flat.data<float>()[i] += 1.0f;
  absl::StatusOr<std::string> resolved = ResolveCheckpoint(root);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, *dir);
  ASSERT_TRUE(LoadHuggingFaceModel(*resolved, *loaded, loaded->store()).ok());
  EXPECT_EQ(Bytes(loaded->store().flat_values(DType::kF32)), Bytes(model->store().flat_values(DType::kF32)));

  absl::StatusOr<nn::OptimizerStateDict> opt2 = LoadOptimizerState(*resolved);
  ASSERT_TRUE(opt2.ok()) << opt2.status();
  EXPECT_EQ(opt2->meta, opt.meta);
  ASSERT_EQ(opt2->tensors.size(), opt.tensors.size());
  for (const auto& [name, t] : opt.tensors) {
    const Tensor& u = opt2->tensors.at(name);
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(u.shape(), t.shape()) << name;
    EXPECT_EQ(Bytes(u), Bytes(t)) << name;
  }

  absl::StatusOr<TrainerState> ts = LoadTrainerState(*resolved);
  ASSERT_TRUE(ts.ok()) << ts.status();
  const TrainerState want = MakeTrainerState();
  EXPECT_EQ(ts->step, 100);
  EXPECT_EQ(ts->lr_scheduler, want.lr_scheduler);
  EXPECT_EQ(ts->loss_scaler, want.loss_scaler);
  EXPECT_EQ(ts->rng, want.rng);
  EXPECT_EQ(ts->data_loader, want.data_loader);

  absl::StatusOr<nn::GPT2Config> c = ReadGPT2Config(*resolved);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_layer, 2);

  // A schedule's saved step past any run's is refused, naming file and key.
  const std::string state_path = *resolved + "/trainer_state.json";
  ASSERT_TRUE(WriteFileAtomically(state_path, "{\"step\": 100, \"lr_scheduler\": {\"step\": 2199023255553}}").ok());
  ts = LoadTrainerState(*resolved);
  ASSERT_FALSE(ts.ok());
  EXPECT_EQ(ts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(ts.status().message(), "trainer_state.json: 'lr_scheduler': \"step\" must be in "
                                                       "[0, 2^40 = 1099511627776], got 2199023255553"))
      << ts.status();
  EXPECT_EQ(c->n_embd, 8);
  EXPECT_EQ(c->vocab_size, 11);
  EXPECT_EQ(c->max_seq_len, 4);
  EXPECT_EQ(c->padded_vocab_size(), 16);
}

TEST(Checkpoint, HuggingFaceNamesShapesAndConfig) {
  const std::string root = MakeTestDir();
  const nn::GPT2Config config = TinyConfig();
  std::unique_ptr<nn::GPT2> model = MakeModel(config, 1);
  CheckpointToSave save;
  save.step = 3;
  save.architecture = model.get();
  save.model = &model->store();
  absl::StatusOr<std::string> dir = SaveCheckpoint(root, save);
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<ShardedSafetensors> st = ShardedSafetensors::Open(*dir);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->size(), 4 + 12 * 2);
  struct Want {
    const char* name;
    std::vector<int64_t> shape;
  };
  for (const Want& w : {Want{"transformer.wte.weight", {11, 8}}, Want{"transformer.wpe.weight", {4, 8}},
                        Want{"transformer.h.0.ln_1.weight", {8}}, Want{"transformer.h.1.attn.c_attn.weight", {8, 24}},
                        Want{"transformer.h.1.attn.c_attn.bias", {24}}, Want{"transformer.h.0.attn.c_proj.weight", {8, 8}},
                        Want{"transformer.h.0.mlp.c_fc.weight", {8, 32}}, Want{"transformer.h.0.mlp.c_proj.weight", {32, 8}},
                        Want{"transformer.ln_f.bias", {8}}}) {
    const SafetensorsTensor* t = st->Find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->shape, w.shape) << w.name;
    EXPECT_EQ(t->dtype, "F32");
  }
  EXPECT_EQ(st->files()[0].metadata().at("format"), "pt");
  const nlohmann::json cfg = nlohmann::json::parse(*ReadFileToString(*dir + "/config.json"));
  EXPECT_EQ(cfg["architectures"], nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["n_embd"], 8);
  EXPECT_EQ(cfg["n_layer"], 2);
  EXPECT_EQ(cfg["n_head"], 2);
  EXPECT_EQ(cfg["n_positions"], 4);
  EXPECT_EQ(cfg["vocab_size"], 11);
  EXPECT_EQ(cfg["torch_dtype"], "float32");
  // No optimizer given: none saved, and loading it says so.
  EXPECT_EQ(LoadOptimizerState(*dir).status().code(), absl::StatusCode::kNotFound);
}

TEST(Checkpoint, ShardedSaveWithIndexLoads) {
  const std::string root = MakeTestDir();
  const nn::GPT2Config config = TinyConfig();
  std::unique_ptr<nn::GPT2> model = MakeModel(config, 5);
  CheckpointToSave save;
  save.step = 1;
  save.architecture = model.get();
  save.model = &model->store();
  absl::StatusOr<std::string> dir = SaveCheckpoint(root, save, {.keep_last = 0, .max_shard_bytes = 1024});
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(Exists(*dir + "/model.safetensors.index.json"));
  EXPECT_FALSE(Exists(*dir + "/model.safetensors"));
  std::unique_ptr<nn::GPT2> loaded = MakeModel(config, 6);
  ASSERT_TRUE(LoadHuggingFaceModel(*dir, *loaded, loaded->store()).ok());
  EXPECT_EQ(Bytes(loaded->store().flat_values(DType::kF32)), Bytes(model->store().flat_values(DType::kF32)));
}

TEST(Checkpoint, CrashLeftoversNeverCorruptLatestAndAreCleanedUp) {
  const std::string root = MakeTestDir();
  const nn::GPT2Config config = TinyConfig();
  std::unique_ptr<nn::GPT2> model = MakeModel(config, 2);
  CheckpointToSave save;
  save.architecture = model.get();
  save.model = &model->store();
  save.step = 10;
  ASSERT_TRUE(SaveCheckpoint(root, save).ok());

  // A save that died after writing some files (another process, now gone)...
  const std::string dead = root + "/step_000020.tmp-999999999";
  ASSERT_EQ(::mkdir(dead.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(dead + "/model.safetensors", "half a file").ok());
  // ...a save killed while replacing `latest` (a process that is gone)...
  const std::string dead_latest = root + "/latest.tmp.999999999.0";
  ASSERT_TRUE(WriteFileAtomically(dead_latest, "step_0000").ok());
  const std::string live_latest = absl::StrCat(root, "/latest.tmp.", ::getppid(), ".0");
  ASSERT_TRUE(WriteFileAtomically(live_latest, "step_0000").ok());
  // ...and one of this process that stopped before publishing.
  absl::StatusOr<std::string> mine = BeginStepDir(root, 30);
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_TRUE(WriteFileAtomically(*mine + "/config.json", "{").ok());

  // `latest` still names the complete step 10, which loads.
  absl::StatusOr<std::string> resolved = ResolveCheckpoint(root);
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(*resolved, root + "/step_000010");
  std::unique_ptr<nn::GPT2> loaded = MakeModel(config, 3);
  EXPECT_TRUE(LoadHuggingFaceModel(*resolved, *loaded, loaded->store()).ok());
  EXPECT_EQ(*ListStepDirs(root), std::vector<std::string>{root + "/step_000010"});

  save.step = 40;
  ASSERT_TRUE(SaveCheckpoint(root, save).ok());
  EXPECT_FALSE(Exists(dead));
  EXPECT_FALSE(Exists(*mine));
  EXPECT_FALSE(Exists(dead_latest));
  EXPECT_TRUE(Exists(live_latest));  // our parent is alive: its write may be in progress
  EXPECT_EQ(*ReadFileToString(root + "/latest"), "step_000040\n");

  // A live process's temporary folder is left alone (our parent is alive).
  const std::string live = absl::StrCat(root, "/step_000050.tmp-", ::getppid());
  ASSERT_EQ(::mkdir(live.c_str(), 0755), 0);
  save.step = 60;
  ASSERT_TRUE(SaveCheckpoint(root, save).ok());
  EXPECT_TRUE(Exists(live));
}

TEST(Checkpoint, KeepsTheLastKAndReplacesARepeatedStep) {
  const std::string root = MakeTestDir();
  const nn::GPT2Config config = TinyConfig();
  std::unique_ptr<nn::GPT2> model = MakeModel(config, 2);
  CheckpointToSave save;
  save.architecture = model.get();
  save.model = &model->store();
  for (int64_t step : {100, 200, 300, 400, 500}) {
    save.step = step;
    ASSERT_TRUE(SaveCheckpoint(root, save, {.keep_last = 2}).ok());
  }
  EXPECT_EQ(*ListStepDirs(root), (std::vector<std::string>{root + "/step_000400", root + "/step_000500"}));

  // Saving step 500 again (new weights) replaces it in place.
  std::unique_ptr<nn::GPT2> other = MakeModel(config, 77);
  save.model = &other->store();
  ASSERT_TRUE(SaveCheckpoint(root, save, {.keep_last = 2}).ok());
  std::unique_ptr<nn::GPT2> loaded = MakeModel(config, 3);
  ASSERT_TRUE(LoadHuggingFaceModel(*ResolveCheckpoint(root), *loaded, loaded->store()).ok());
  EXPECT_EQ(Bytes(loaded->store().flat_values(DType::kF32)), Bytes(other->store().flat_values(DType::kF32)));
  EXPECT_EQ(ListStepDirs(root)->size(), 2u);

  // keep_last = 0 keeps everything.
  save.step = 600;
  ASSERT_TRUE(SaveCheckpoint(root, save, {.keep_last = 0}).ok());
  EXPECT_EQ(ListStepDirs(root)->size(), 3u);
}

TEST(Checkpoint, LoadValidationErrors) {
  const std::string root = MakeTestDir();
  const nn::GPT2Config config = TinyConfig();
  std::unique_ptr<nn::GPT2> model = MakeModel(config, 2);

  EXPECT_EQ(ResolveCheckpoint(root).status().code(), absl::StatusCode::kNotFound);

  // A file with a misspelt name and an extra tensor.
  const nn::ParameterStore& store = model->store();
  auto write_model = [&](const std::string& dir, const std::string& rename_from, const std::string& rename_to,
                         bool extra) {
    ::mkdir(dir.c_str(), 0755);
    std::vector<SafetensorsEntry> entries;
    for (const nn::Parameter& p : store.parameters()) {
      const core::Shape hf = nn::GPT2::hugging_face_shape(config, *store.table().find(p.name));
      entries.push_back({p.name == rename_from ? rename_to : p.name, "F32",
                         std::vector<int64_t>(hf.dims().begin(), hf.dims().end()), p.value.raw_data(),
                         static_cast<uint64_t>(hf.numel()) * 4});
    }
    static const float kOne = 1.0f;
    if (extra) entries.push_back({"lm_head.weight", "F32", {}, &kOne, 4});
    ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", entries).ok());
  };
  std::unique_ptr<nn::GPT2> target = MakeModel(config, 4);

  write_model(root + "/typo", "transformer.ln_f.weight", "transformer.ln_f.weigth", false);
  absl::Status s = LoadHuggingFaceModel(root + "/typo", *target, target->store());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "has no tensor 'transformer.ln_f.weight'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "did you mean \"transformer.ln_f.weigth\"")) << s;

  write_model(root + "/extra", "", "", true);
  s = LoadHuggingFaceModel(root + "/extra", *target, target->store());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "unexpected tensor 'lm_head.weight'")) << s;

  // Shape mismatch: a model with a longer context.
  CheckpointToSave save;
  save.step = 1;
  save.architecture = model.get();
  save.model = &store;
  absl::StatusOr<std::string> dir = SaveCheckpoint(root + "/ok", save);
  ASSERT_TRUE(dir.ok());
  nn::GPT2Config longer = config;
  longer.max_seq_len = 8;
  std::unique_ptr<nn::GPT2> big = MakeModel(longer, 4);
  s = LoadHuggingFaceModel(*dir, *big, big->store());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "'transformer.wpe.weight' has shape [4, 8], the model wants [8, 8]")) << s;
  // The failed loads changed nothing.
  std::unique_ptr<nn::GPT2> fresh = MakeModel(longer, 4);
  EXPECT_EQ(Bytes(big->store().flat_values(DType::kF32)), Bytes(fresh->store().flat_values(DType::kF32)));

  EXPECT_FALSE(io::TrainerStateFromJson("{\"step\": \"x\"}").ok());
  EXPECT_FALSE(io::TrainerStateFromJson("{\"step\": 1, \"rng\": {\"seed\": 1}}").ok());
  // Deeply nested values are refused with a message, without recursing per level.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string key : {"step", "lr_scheduler", "loss_scaler"}) {
    const std::string text = key == "step" ? "{\"step\": " + deep + "}"
                                           : "{\"step\": 1, \"" + key + "\": {\"x\": " + deep + "}}";
    const absl::StatusOr<io::TrainerState> t = io::TrainerStateFromJson(text);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << key << ": " << t.status();
  }
  EXPECT_FALSE(GPT2ConfigFromHuggingFaceJson("{\"n_layer\": 2}").ok());
}

}  // namespace
}  // namespace colossal::nn
