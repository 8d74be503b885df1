#include "io/safetensors/writer.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/common/absl_view.h"
#include "io/safetensors/dtypes.h"
#include "io/safetensors/fixture_tensors.h"
#include "io/safetensors/reader.h"
#include "io/safetensors/test_util.h"

namespace colossal::io {
namespace {

using testing::ListDir;
using testing::MakeTestDir;
using testing::ReadAll;

std::string AsString(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Deterministic bytes for a tensor.
std::string Pattern(size_t n, int seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i * 131 + seed * 7 + 1);
  return out;
}

// The usage example of writer.h, with a smaller embedding.
TEST(SafetensorsWriterTest, HeaderExample) {
  const std::string path = MakeTestDir() + "/model.safetensors";
  std::vector<float> wte(257 * 8);
  for (size_t i = 0; i < wte.size(); ++i) wte[i] = static_cast<float>(i) * 0.25f;
  std::vector<SafetensorsEntry> tensors = {
      {"wte.weight", "F32", {257, 8}, wte.data(), wte.size() * sizeof(float)},
  };
  absl::Status s = WriteSafetensors(path, tensors, {{"format", "pt"}});
  ASSERT_TRUE(s.ok()) << s;

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata(), (SafetensorsMetadata{{"format", "pt"}}));
  const SafetensorsTensor* t = file->Find("wte.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{257, 8}));
  ASSERT_EQ(t->data.size(), wte.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(t->data.data(), wte.data(), t->data.size()), 0);
  EXPECT_EQ(file->data_start() % 64, 0u);
  // Python's writer puts "__metadata__" first and the header is compact JSON.
  const std::string bytes = ReadAll(path);
  EXPECT_TRUE(absl::StartsWith(bytes.substr(8), R"({"__metadata__":{"format":"pt"},"wte.weight":{"dtype":"F32",)"
                                                R"("shape":[257,8],"data_offsets":[0,8224]}})"))
      << bytes.substr(8, 120);
}

TEST(SafetensorsWriterTest, RoundTripsEveryDtypeAndOddShapes) {
  const std::string path = MakeTestDir() + "/all.safetensors";
  std::vector<std::string> payloads;
  std::vector<SafetensorsEntry> tensors;
  int seed = 0;
  for (const SafetensorsDType& dtype : SafetensorsDTypes()) {
    // Shapes that fill whole bytes for sub-byte types too: 8 elements.
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{2, 4}, {1, 1, 8}, {8}, {0}, {3, 0, 5}}) {
      const uint64_t bytes = *SafetensorsTensorBytes(dtype, shape);
      payloads.push_back(Pattern(bytes, ++seed));
      tensors.push_back({absl::StrCat(ToAbsl(dtype.name), "/", ShapeString(shape)), std::string(dtype.name), shape,
                         nullptr, bytes});
    }
    if (dtype.bits % 8 == 0) {  // scalars of whole-byte types
      payloads.push_back(Pattern(dtype.bits / 8, ++seed));
      tensors.push_back({absl::StrCat(ToAbsl(dtype.name), "/scalar"), std::string(dtype.name), {}, nullptr,
                         static_cast<uint64_t>(dtype.bits / 8)});
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = payloads[i].empty() ? nullptr : payloads[i].data();
  const SafetensorsMetadata metadata = {{"step", "1200"}, {"note", "utf-8 ✓"}, {"", "empty key"}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata(), metadata);
  ASSERT_EQ(file->tensors().size(), tensors.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    const SafetensorsTensor& got = file->tensors()[i];  // data order == the order given
    EXPECT_EQ(got.name, tensors[i].name);
    EXPECT_EQ(got.dtype, tensors[i].dtype);
    EXPECT_EQ(got.shape, tensors[i].shape);
    EXPECT_EQ(got.begin, offset);
    EXPECT_EQ(AsString(got.data), payloads[i]);
    offset += tensors[i].bytes;
  }
}

TEST(SafetensorsWriterTest, WritesWhatPythonWrote) {
  // Our file of the fixture's tensors reads back the same as Python's file.
  const std::string path = MakeTestDir() + "/ours.safetensors";
  const std::vector<FixtureTensor> fixture = FixtureTensors();
  std::vector<SafetensorsEntry> entries;
  for (const FixtureTensor& t : fixture) entries.push_back(t.Entry());
  ASSERT_TRUE(WriteSafetensors(path, entries, FixtureMetadata()).ok());
  absl::StatusOr<SafetensorsFile> ours = SafetensorsFile::Open(path);
  absl::StatusOr<SafetensorsFile> python = SafetensorsFile::Open(kPythonFixturePath);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_TRUE(python.ok()) << python.status();
  EXPECT_EQ(ours->metadata(), python->metadata());
  ASSERT_EQ(ours->tensors().size(), python->tensors().size());
  for (const SafetensorsTensor& t : python->tensors()) {
    const SafetensorsTensor* o = ours->Find(t.name);
    ASSERT_NE(o, nullptr) << t.name;
    EXPECT_EQ(o->dtype, t.dtype);
    EXPECT_EQ(o->shape, t.shape);
    EXPECT_EQ(AsString(o->data), AsString(t.data));
  }
}

TEST(SafetensorsWriterTest, AlignmentOption) {
  const std::string dir = MakeTestDir();
  const std::string payload = Pattern(12, 1);
  const std::vector<SafetensorsEntry> tensors = {{"x", "F32", {3}, payload.data(), 12}};
  for (uint64_t alignment : {8, 64, 4096}) {
    const std::string path = absl::StrCat(dir, "/a", alignment, ".safetensors");
    ASSERT_TRUE(WriteSafetensors(path, tensors, {}, {.alignment = alignment}).ok());
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->data_start() % alignment, 0u);
    EXPECT_LT(file->data_start(), 8 + 64 + alignment);  // padding is less than one alignment unit
    EXPECT_EQ(AsString(file->Find("x")->data), payload);
  }
  absl::Status bad = WriteSafetensors(dir + "/bad.safetensors", tensors, {}, {.alignment = 12});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "alignment 12 must be a power of two, at least 8")) << bad;
}

TEST(SafetensorsWriterTest, EmptyCheckpointRoundTrips) {
  const std::string path = MakeTestDir() + "/empty.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_EQ(file->file_bytes(), 64u);
  EXPECT_EQ(ReadAll(path).substr(8, 3), "{} ");
}

TEST(SafetensorsWriterTest, InvalidTensorsWriteNothing) {
  const std::string dir = MakeTestDir();
  const std::string path = dir + "/model.safetensors";
  const std::string four(4, 'x');
  struct Case {
    std::vector<SafetensorsEntry> tensors;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{{"a", "F32", {1}, four.data(), 4}, {"a", "F32", {1}, four.data(), 4}}, "tensor 'a' is given twice"},
      {{{"a", "F31", {1}, four.data(), 4}}, "tensor 'a': unknown dtype 'F31' (safetensors dtypes: BOOL"},
      {{{"a", "F32", {2}, four.data(), 4}}, "tensor 'a': dtype F32 and shape [2] need 8 bytes, but 4 were given"},
      {{{"a", "F32", {-1}, four.data(), 4}}, "tensor 'a': shape [-1] has a negative dimension"},
      {{{"a", "F32", {1}, nullptr, 4}}, "tensor 'a' has no data pointer"},
      {{{"__metadata__", "F32", {1}, four.data(), 4}}, "'__metadata__' is reserved"},
      {{{"", "F32", {1}, four.data(), 4}}, "a tensor has an empty name"},
      {{{"bad\xff", "F32", {1}, four.data(), 4}}, "is not valid UTF-8"},
      {{{"f4", "F4", {3}, four.data(), 2}}, "tensor 'f4': 3 elements of F4 (4 bits each) do not fill whole bytes"},
  };
  for (const Case& c : cases) {
    absl::Status s = WriteSafetensors(path, c.tensors);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("safetensors file '", path, "': "))) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.needle)) << s << "\n  expected to contain: " << c.needle;
  }
  EXPECT_TRUE(ListDir(dir).empty());
  absl::Status s = WriteSafetensors("/nonexistent/dir/model.safetensors", {});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "/nonexistent/dir/model.safetensors")) << s;
}

TEST(SafetensorsWriterTest, ReplacesAtomically) {
  const std::string dir = MakeTestDir();
  const std::string path = dir + "/model.safetensors";
  const std::string a = Pattern(8, 1), b = Pattern(400000, 2);
  ASSERT_TRUE(WriteSafetensors(path, std::vector<SafetensorsEntry>{{"a", "U8", {8}, a.data(), 8}}).ok());
  ASSERT_TRUE(WriteSafetensors(path, std::vector<SafetensorsEntry>{{"b", "U16", {200000}, b.data(), b.size()}}).ok());
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"model.safetensors"});  // no temporary files left
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Find("a"), nullptr);
  EXPECT_EQ(AsString(file->Find("b")->data), b);
}

TEST(SafetensorsDTypesTest, SizesAndShapes) {
  EXPECT_EQ(SafetensorsDTypes().size(), 22u);
  EXPECT_EQ(FindSafetensorsDType("BF16")->bits, 16);
  EXPECT_EQ(FindSafetensorsDType("bf16"), nullptr);  // names are case-sensitive
  EXPECT_EQ(*SafetensorsTensorBytes(*FindSafetensorsDType("BF16"), std::vector<int64_t>{768, 2304}), 3538944u);
  EXPECT_EQ(*SafetensorsTensorBytes(*FindSafetensorsDType("F64"), std::vector<int64_t>{}), 8u);
  EXPECT_EQ(*SafetensorsTensorBytes(*FindSafetensorsDType("F6_E3M2"), std::vector<int64_t>{4}), 3u);
  EXPECT_FALSE(SafetensorsTensorBytes(*FindSafetensorsDType("F6_E3M2"), std::vector<int64_t>{2}).ok());
  // A zero dimension makes any shape empty, even after huge ones.
  EXPECT_EQ(*SafetensorsNumElements(std::vector<int64_t>{INT64_MAX, INT64_MAX, 0}), 0);
  EXPECT_FALSE(SafetensorsNumElements(std::vector<int64_t>{INT64_MAX, 2}).ok());
  EXPECT_FALSE(SafetensorsTensorBytes(*FindSafetensorsDType("F64"), std::vector<int64_t>{INT64_MAX / 4}).ok());
  EXPECT_EQ(ShapeString(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(ShapeString(std::vector<int64_t>{2, 3}), "[2, 3]");
  EXPECT_TRUE(absl::StartsWith(SafetensorsDTypeList(), "BOOL, F4, F6_E2M3"));
}

}  // namespace
}  // namespace colossal::io
