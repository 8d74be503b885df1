#include "io/safetensors/sharded.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/safetensors/test_util.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

using testing::ListDir;
using testing::MakeTestDir;
using testing::ReadAll;
using testing::WriteRaw;

std::string AsString(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Tensors of the given byte sizes named t0, t1, ... (U8, so any size works).
struct Tensors {
  explicit Tensors(const std::vector<uint64_t>& sizes) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      payloads.push_back(std::string(sizes[i], static_cast<char>('a' + i)));
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      entries.push_back({absl::StrCat("t", i), "U8", {static_cast<int64_t>(sizes[i])}, payloads[i].data(), sizes[i]});
    }
  }
  std::vector<std::string> payloads;
  std::vector<SafetensorsEntry> entries;
};

ShardedWriteOptions MaxShardBytes(uint64_t max_shard_bytes, std::string prefix = "model") {
  ShardedWriteOptions options;
  options.max_shard_bytes = max_shard_bytes;
  options.prefix = std::move(prefix);
  return options;
}

void ExpectAllTensors(const ShardedSafetensors& ckpt, const Tensors& tensors) {
  ASSERT_EQ(ckpt.size(), tensors.entries.size());
  for (size_t i = 0; i < tensors.entries.size(); ++i) {
    absl::StatusOr<const SafetensorsTensor*> t = ckpt.Get(tensors.entries[i].name);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(AsString((*t)->data), tensors.payloads[i]);
  }
}

// The usage example of sharded.h, with small shards.
TEST(ShardedSafetensorsTest, HeaderExample) {
  const std::string dir = MakeTestDir();
  const Tensors tensors({40, 30, 50, 10, 20});
  absl::StatusOr<ShardedWriteResult> saved =
      WriteShardedSafetensors(dir, tensors.entries, {{"format", "pt"}}, MaxShardBytes(70));
  ASSERT_TRUE(saved.ok()) << saved.status();
  // [40, 30] [50, 10] [20]
  EXPECT_EQ(saved->files, (std::vector<std::string>{"model-00001-of-00003.safetensors",
                                                     "model-00002-of-00003.safetensors",
                                                     "model-00003-of-00003.safetensors"}));
  EXPECT_EQ(saved->index_file, "model.safetensors.index.json");
  EXPECT_EQ(saved->total_size, 150u);
  EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"model-00001-of-00003.safetensors",
                                                    "model-00002-of-00003.safetensors",
                                                    "model-00003-of-00003.safetensors",
                                                    "model.safetensors.index.json"}));
  const nlohmann::json index = nlohmann::json::parse(ReadAll(dir + "/model.safetensors.index.json"));
  EXPECT_EQ(index, nlohmann::json::parse(R"({"metadata": {"total_size": 150}, "weight_map": {
      "t0": "model-00001-of-00003.safetensors", "t1": "model-00001-of-00003.safetensors",
      "t2": "model-00002-of-00003.safetensors", "t3": "model-00002-of-00003.safetensors",
      "t4": "model-00003-of-00003.safetensors"}})"));

  for (const std::string& path : {dir, dir + "/model.safetensors.index.json"}) {
    absl::StatusOr<ShardedSafetensors> ckpt = ShardedSafetensors::Open(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ExpectAllTensors(*ckpt, tensors);
    EXPECT_EQ(ckpt->files().size(), 3u);
    EXPECT_EQ(ckpt->index_path(), dir + "/model.safetensors.index.json");
    EXPECT_EQ(ckpt->total_size(), 150u);
    EXPECT_EQ(ckpt->names(), (std::vector<std::string>{"t0", "t1", "t2", "t3", "t4"}));
    for (const SafetensorsFile& f : ckpt->files()) {
      EXPECT_EQ(f.metadata(), (SafetensorsMetadata{{"format", "pt"}}));
    }
  }
}

TEST(ShardedSafetensorsTest, PlanIsGreedyInOrder) {
  const Tensors tensors({10, 200, 10, 10, 95, 5});
  // A tensor over the limit gets a file of its own.
  EXPECT_EQ(PlanSafetensorsShards(tensors.entries, 100),
            (std::vector<std::vector<size_t>>{{0}, {1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(PlanSafetensorsShards(tensors.entries, 1000), (std::vector<std::vector<size_t>>{{0, 1, 2, 3, 4, 5}}));
  EXPECT_EQ(PlanSafetensorsShards({}, 100), (std::vector<std::vector<size_t>>{{}}));
  EXPECT_EQ(SafetensorsShardName("pytorch_model", 2, 12), "pytorch_model-00002-of-00012.safetensors");
}

TEST(ShardedSafetensorsTest, OneFileWhenItFits) {
  const std::string dir = MakeTestDir();
  const Tensors tensors({40, 30});
  absl::StatusOr<ShardedWriteResult> saved = WriteShardedSafetensors(dir, tensors.entries);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->files, std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(saved->index_file, "");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"model.safetensors"});
  for (const std::string& path : {dir, dir + "/model.safetensors"}) {
    absl::StatusOr<ShardedSafetensors> ckpt = ShardedSafetensors::Open(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ExpectAllTensors(*ckpt, tensors);
    EXPECT_EQ(ckpt->index_path(), "");
    EXPECT_EQ(ckpt->total_size(), 70u);
  }
}

TEST(ShardedSafetensorsTest, StaleFilesOfEarlierSavesAreRemoved) {
  const std::string dir = MakeTestDir();
  WriteRaw(dir + "/README.md", "mine");
  WriteRaw(dir + "/other-00001-of-00002.safetensors", "not ours: another prefix");
  const Tensors three({40, 40, 40});
  ASSERT_TRUE(WriteShardedSafetensors(dir, three.entries, {}, MaxShardBytes(40)).ok());
  const Tensors two({40, 40});
  ASSERT_TRUE(WriteShardedSafetensors(dir, two.entries, {}, MaxShardBytes(40)).ok());
  EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"README.md", "model-00001-of-00002.safetensors",
                                                    "model-00002-of-00002.safetensors",
                                                    "model.safetensors.index.json",
                                                    "other-00001-of-00002.safetensors"}));
  absl::StatusOr<ShardedSafetensors> ckpt = ShardedSafetensors::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ExpectAllTensors(*ckpt, two);
  ASSERT_TRUE(WriteShardedSafetensors(dir, two.entries).ok());  // now one file
  EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"README.md", "model.safetensors",
                                                    "other-00001-of-00002.safetensors"}));
}

TEST(ShardedSafetensorsTest, CustomPrefix) {
  const std::string dir = MakeTestDir();
  const Tensors tensors({10, 10});
  absl::StatusOr<ShardedWriteResult> saved =
      WriteShardedSafetensors(dir, tensors.entries, {}, MaxShardBytes(10, "optimizer"));
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->index_file, "optimizer.safetensors.index.json");
  absl::StatusOr<ShardedSafetensors> ckpt = ShardedSafetensors::Open(dir + "/optimizer.safetensors.index.json");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ExpectAllTensors(*ckpt, tensors);
  absl::StatusOr<ShardedWriteResult> bad = WriteShardedSafetensors(dir, tensors.entries, {}, MaxShardBytes(100, "a/b"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShardedSafetensorsTest, InvalidTensorsWriteNothing) {
  const std::string dir = MakeTestDir();
  Tensors tensors({10, 10, 10});
  tensors.entries[2].bytes = 11;  // disagrees with its shape
  absl::StatusOr<ShardedWriteResult> saved = WriteShardedSafetensors(dir, tensors.entries, {}, MaxShardBytes(10));
  ASSERT_FALSE(saved.ok());
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "tensor 't2'")) << saved.status();
  EXPECT_TRUE(ListDir(dir).empty());
}

// Laid out first, filled in pieces out of order and across shard files:
// the same files as a write from memory.
TEST(ShardedSafetensorsTest, StreamedWriteInAnyOrderEqualsOneWrite) {
  const std::string dir = MakeTestDir();
  const std::string whole = MakeTestDir();
  const Tensors tensors({40, 30, 50, 10, 20});
  ASSERT_TRUE(WriteShardedSafetensors(whole, tensors.entries, {{"format", "pt"}}, MaxShardBytes(70)).ok());
  std::vector<SafetensorsEntry> layout = tensors.entries;
  for (SafetensorsEntry& e : layout) e.data = nullptr;  // a layout only
  absl::StatusOr<ShardedSafetensorsWriter> out =
      ShardedSafetensorsWriter::Create(dir, layout, {{"format", "pt"}}, MaxShardBytes(70));
  ASSERT_TRUE(out.ok()) << out.status();
  // Every tensor in two or three pieces, last tensor first, back half first.
  for (size_t i = tensors.entries.size(); i-- > 0;) {
    const std::string& data = tensors.payloads[i];
    const size_t a = data.size() / 3, b = data.size() / 2;
    ASSERT_TRUE(out->Write(i, b, data.data() + b, data.size() - b).ok());
    ASSERT_TRUE(out->Write(i, 0, data.data(), a).ok());
    ASSERT_TRUE(out->Write(i, a, data.data() + a, b - a).ok());
  }
  absl::StatusOr<ShardedWriteResult> saved = out->Commit();
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->total_size, 150u);
  EXPECT_EQ(ListDir(dir), ListDir(whole));
  for (const std::string& name : ListDir(dir)) {
    EXPECT_EQ(ReadAll(dir + "/" + name), ReadAll(whole + "/" + name)) << name;
  }
}

TEST(ShardedSafetensorsTest, StreamedWriteRefusesOverlapsGapsAndRangesPastTheEnd) {
  const std::string dir = MakeTestDir();
  const Tensors tensors({16, 8});
  {
    absl::StatusOr<ShardedSafetensorsWriter> out = ShardedSafetensorsWriter::Create(dir, tensors.entries);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(out->Write(0, 4, "xxxx", 4).ok());
    absl::Status overlap = out->Write(0, 6, "yyyy", 4);
    EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(overlap.message(), "tensor 't0': bytes [6, 10) overlap")) << overlap;
    absl::Status past = out->Write(1, 6, "yyyy", 4);
    EXPECT_TRUE(absl::StrContains(past.message(), "tensor 't1': bytes [6, 10) past its 8")) << past;
    ASSERT_TRUE(out->Write(1, 0, "12345678", 8).ok());
    ASSERT_TRUE(out->Write(0, 0, "abcd", 4).ok());
    ASSERT_TRUE(out->Write(0, 12, "abcd", 4).ok());  // bytes 8..12 of t0 never come
    absl::StatusOr<ShardedWriteResult> saved = out->Commit();
    EXPECT_EQ(saved.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(saved.status().message(), "tensor 't0' has 16 bytes, not all of them written"))
        << saved.status();
  }
  // Nothing was published, and the temporary files are gone.
  EXPECT_TRUE(ListDir(dir).empty());
}

TEST(ShardedSafetensorsTest, BadIndexesGetClearErrors) {
  const std::string dir = MakeTestDir();
  const Tensors tensors({10, 10});
  ASSERT_TRUE(WriteShardedSafetensors(dir, tensors.entries, {}, MaxShardBytes(10)).ok());
  const std::string index = dir + "/model.safetensors.index.json";
  const std::string shard1 = "model-00001-of-00002.safetensors";
  const std::string shard2 = "model-00002-of-00002.safetensors";
  struct Case {
    std::string json;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"{", "not valid JSON"},
      {R"({"metadata": {}})", R"(expected an object with a "weight_map" object)"},
      {R"({"weight_map": {"t0": 5}})", "weight_map['t0'] is not a file name"},
      {R"({"weight_map": {"t0": "/etc/passwd"}})", "must be a file name relative to the index's folder"},
      {R"({"weight_map": {"t0": "../x.safetensors"}})", "must be a file name relative to the index's folder"},
      {absl::StrCat(R"({"weight_map": {"t0": ")", shard1, R"(", "t1": ")", shard1, R"("}})"),
       absl::StrCat("weight_map puts tensor 't1' in '", shard1, "', which has no such tensor")},
      {absl::StrCat(R"({"weight_map": {"t0": ")", shard1, R"("}})"), ""},  // t1's file is not listed: fine
      {absl::StrCat(R"({"weight_map": {"t0": ")", shard1, R"(", "t1": ")", shard2, R"(", "t2": ")", shard2,
                    R"("}})"),
       absl::StrCat("weight_map puts tensor 't2' in '", shard2, "', which has no such tensor")},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    WriteRaw(index, c.json);
    absl::StatusOr<ShardedSafetensors> ckpt = ShardedSafetensors::Open(index);
    if (c.needle.empty()) {
      EXPECT_TRUE(ckpt.ok()) << ckpt.status();
      continue;
    }
    ASSERT_FALSE(ckpt.ok());
    EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kInvalidArgument) << ckpt.status();
    EXPECT_TRUE(absl::StrContains(ckpt.status().message(), absl::StrCat("safetensors index '", index, "': ")))
        << ckpt.status();
    EXPECT_TRUE(absl::StrContains(ckpt.status().message(), c.needle)) << ckpt.status();
  }

  // A file holding a tensor the index puts elsewhere (or nowhere).
  const Tensors both({10, 10});
  ASSERT_TRUE(WriteSafetensors(dir + "/" + shard2, both.entries).ok());
  WriteRaw(index, absl::StrCat(R"({"weight_map": {"t0": ")", shard1, R"(", "t1": ")", shard2, R"("}})"));
  absl::StatusOr<ShardedSafetensors> extra = ShardedSafetensors::Open(index);
  ASSERT_FALSE(extra.ok());
  EXPECT_TRUE(absl::StrContains(extra.status().message(),
                                absl::StrCat("file '", shard2, "' holds tensor 't0', which the weight_map does not put there")))
      << extra.status();

  // A missing shard: the file system's error names it.
  WriteRaw(index, R"({"weight_map": {"t0": "model-00009-of-00009.safetensors"}})");
  absl::StatusOr<ShardedSafetensors> missing = ShardedSafetensors::Open(index);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), dir + "/model-00009-of-00009.safetensors"))
      << missing.status();
}

TEST(ShardedSafetensorsTest, OpenErrors) {
  const std::string dir = MakeTestDir();
  absl::StatusOr<ShardedSafetensors> empty = ShardedSafetensors::Open(dir);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(empty.status().message(), absl::StrCat("checkpoint folder '", dir,
                                                   "' has neither model.safetensors.index.json nor model.safetensors"));
  absl::StatusOr<ShardedSafetensors> missing = ShardedSafetensors::Open(dir + "/nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), dir + "/nope")) << missing.status();

  const Tensors tensors({10, 10});
  ASSERT_TRUE(WriteShardedSafetensors(dir, tensors.entries, {}, MaxShardBytes(10)).ok());
  absl::StatusOr<ShardedSafetensors> ckpt = ShardedSafetensors::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  absl::StatusOr<const SafetensorsTensor*> t = ckpt->Get("model.t0");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            absl::StrCat("safetensors index '", dir,
                         "/model.safetensors.index.json' has no tensor 'model.t0' (did you mean 't0'?); it has 2 tensors"));
}

}  // namespace
}  // namespace colossal::io
