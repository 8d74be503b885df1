#include "io/safetensors/reader.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/safetensors/fixture_tensors.h"
#include "io/safetensors/test_util.h"

namespace colossal::io {
namespace {

using testing::MakeTestDir;
using testing::RawSafetensors;
using testing::WriteRaw;

std::string AsString(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// The usage example of reader.h, on the file Python's safetensors wrote.
TEST(SafetensorsReaderTest, ReadsAFileWrittenByPython) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(kPythonFixturePath);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata(), FixtureMetadata());
  const std::vector<FixtureTensor> expected = FixtureTensors();
  ASSERT_EQ(file->tensors().size(), expected.size());
  for (const FixtureTensor& want : expected) {
    SCOPED_TRACE(want.name);
    absl::StatusOr<const SafetensorsTensor*> got = file->Get(want.name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*got)->name, want.name);
    EXPECT_EQ((*got)->dtype, want.dtype);
    EXPECT_EQ((*got)->shape, want.shape);
    EXPECT_EQ(AsString((*got)->data), want.bytes);
    // Python orders tensors by alignment, so each is aligned to its element size.
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*got)->data.data()) % ((*got)->dtype_bits / 8), 0u);
  }
  EXPECT_EQ(file->Find("scalar")->num_elements(), 1);
  EXPECT_EQ(file->Find("empty")->num_elements(), 0);
  EXPECT_EQ(file->Find("model.layers.0.weight")->num_elements(), 24);
  // tensors() is in data order.
  for (size_t i = 1; i < file->tensors().size(); ++i) {
    EXPECT_EQ(file->tensors()[i - 1].end, file->tensors()[i].begin);
  }
  EXPECT_EQ(file->data_start() % 8, 0u);
  EXPECT_EQ(file->data_start() + file->tensors().back().end, file->file_bytes());
}

TEST(SafetensorsReaderTest, MissingTensorsAreNamedWithAHint) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(kPythonFixturePath);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Find("nope"), nullptr);
  absl::StatusOr<const SafetensorsTensor*> missing = file->Get("layers.0.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            absl::StrCat("safetensors file '", kPythonFixturePath,
                         "' has no tensor 'layers.0.weight' (did you mean 'model.layers.0.weight'?); it has 13 tensors"));
}

TEST(SafetensorsReaderTest, AcceptsEmptyAndUnpaddedHeaders) {
  const std::string dir = MakeTestDir();
  WriteRaw(dir + "/empty.safetensors", RawSafetensors("{}", ""));
  absl::StatusOr<SafetensorsFile> empty = SafetensorsFile::Open(dir + "/empty.safetensors");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->tensors().empty());
  EXPECT_TRUE(empty->metadata().empty());

  // Not padded to 8 (the format asks for it, readers accept it), an unknown
  // extra field, a zero-size tensor between two others.
  const std::string header =
      R"({"b":{"dtype":"U8","shape":[0],"data_offsets":[2,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":1},)"
      R"("c":{"dtype":"U8","shape":[1,1],"data_offsets":[2,3]}})";
  WriteRaw(dir + "/odd.safetensors", RawSafetensors(header, "xyz", /*pad_to_8=*/false));
  absl::StatusOr<SafetensorsFile> odd = SafetensorsFile::Open(dir + "/odd.safetensors");
  ASSERT_TRUE(odd.ok()) << odd.status();
  ASSERT_EQ(odd->tensors().size(), 3u);
  EXPECT_EQ(odd->tensors()[0].name, "a");
  EXPECT_EQ(odd->tensors()[1].name, "b");
  EXPECT_EQ(odd->tensors()[2].name, "c");
  EXPECT_EQ(AsString(odd->Find("a")->data), "xy");
  EXPECT_EQ(AsString(odd->Find("c")->data), "z");
  EXPECT_TRUE(odd->Find("b")->data.empty());

  // Sub-byte dtypes: 6 F4 values are 3 bytes, 4 F6 values are 3 bytes.
  WriteRaw(dir + "/packed.safetensors",
           RawSafetensors(R"({"f4":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},)"
                          R"("f6":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[3,6]}})",
                          "abcdef"));
  absl::StatusOr<SafetensorsFile> packed = SafetensorsFile::Open(dir + "/packed.safetensors");
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->Find("f4")->dtype_bits, 4);
}

TEST(SafetensorsReaderTest, MovedFilesKeepTheirViews) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(kPythonFixturePath);
  ASSERT_TRUE(file.ok());
  const std::byte* data = file->Find("f32")->data.data();
  SafetensorsFile moved = std::move(file).value();
  EXPECT_EQ(moved.Find("f32")->data.data(), data);
  SafetensorsFile assigned = std::move(moved);
  EXPECT_EQ(assigned.Find("f32")->data.data(), data);
}

// --- corrupt files: each validation names the file (and tensor) -----------

struct Corrupt {
  const char* label;
  std::string bytes;
  absl::StatusCode code;
  std::string needle;
};

std::vector<Corrupt> CorruptCases() {
  const std::string f32x2 = std::string(8, 'd');
  std::string huge_length(8, '\0');
  huge_length[4] = 1;  // 2^32
  return {
      {"empty_file", "", absl::StatusCode::kDataLoss, "has 0 bytes, fewer than the 8-byte header length"},
      {"short_file", "abcde", absl::StatusCode::kDataLoss, "has 5 bytes"},
      {"header_past_end", RawSafetensors("{}", "").substr(0, 12), absl::StatusCode::kDataLoss,
       "header length 8 runs past the end of the file (12 bytes)"},
      {"header_too_large", huge_length + "{}", absl::StatusCode::kInvalidArgument,
       "header length 4294967296 is over the format's limit of 100000000 bytes"},
      {"not_an_object", RawSafetensors("[1, 2]", ""), absl::StatusCode::kInvalidArgument,
       "the header does not start with '{'"},
      {"bad_json", RawSafetensors(R"({"a": {"dtype": "F32",})", ""), absl::StatusCode::kInvalidArgument,
       "the header is not valid JSON: parse error at line 1"},
      {"bad_utf8", RawSafetensors("{\"a\xff\": 1}", ""), absl::StatusCode::kInvalidArgument,
       "the header is not valid JSON"},
      {"unknown_dtype",
       RawSafetensors(R"({"w":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "tensor 'w': unknown dtype 'F128' (safetensors dtypes: BOOL, F4,"},
      {"dtype_not_string", RawSafetensors(R"({"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "tensor 'w': dtype must be a string, not 4"},
      {"missing_shape", RawSafetensors(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "tensor 'w': missing 'shape'"},
      {"entry_not_object", RawSafetensors(R"({"w":[1,2]})", ""), absl::StatusCode::kInvalidArgument,
       "tensor 'w': expected an object with dtype, shape and data_offsets, got [1,2]"},
      {"negative_dim", RawSafetensors(R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "tensor 'w': shape must be a list of non-negative integers, not [2,-1]"},
      {"float_dim", RawSafetensors(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "shape must be a list of non-negative integers"},
      {"shape_mismatch", RawSafetensors(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,8]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "tensor 'w': dtype F32 and shape [2, 3] need 24 bytes but data_offsets [0, 8] hold 8"},
      {"shape_overflow",
       RawSafetensors(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "tensor 'w': shape [4294967296, 4294967296] has more than 2^63 elements"},
      {"subbyte_partial", RawSafetensors(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", "ab"),
       absl::StatusCode::kInvalidArgument, "tensor 'w': 3 elements of F4 (4 bits each) do not fill whole bytes"},
      {"offsets_reversed", RawSafetensors(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "tensor 'w': data_offsets must be [begin, end] with integers 0 <= begin <= end, not [8,0]"},
      {"offsets_three", RawSafetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "data_offsets must be [begin, end]"},
      {"offsets_past_end", RawSafetensors(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f32x2),
       absl::StatusCode::kDataLoss,
       "tensor 'w': data_offsets [0, 16] run past the end of the data (8 bytes after the header): truncated?"},
      {"overlap",
       RawSafetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                      f32x2),
       absl::StatusCode::kInvalidArgument, "tensors 'a' (data_offsets [0, 8]) and 'b' ([4, 8]) overlap"},
      {"gap",
       RawSafetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
                      f32x2),
       absl::StatusCode::kInvalidArgument,
       "data bytes [4, 6) belong to no tensor (between 'a' and 'b'); tensors must cover the data contiguously"},
      {"gap_at_start", RawSafetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "data bytes [0, 4) belong to no tensor (before the first tensor)"},
      {"trailing_bytes", RawSafetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32x2),
       absl::StatusCode::kDataLoss,
       "the last 4 bytes of the file belong to no tensor (the tensors end at data byte 4 of 8)"},
      {"duplicate_name",
       RawSafetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                      f32x2),
       absl::StatusCode::kInvalidArgument, "tensor 'a' appears twice in the header"},
      {"duplicate_field",
       RawSafetensors(R"({"a":{"dtype":"F32","dtype":"U8","shape":[2],"data_offsets":[0,8]}})", f32x2),
       absl::StatusCode::kInvalidArgument, "tensor 'a': key 'dtype' appears twice"},
      {"duplicate_metadata_key", RawSafetensors(R"({"__metadata__":{"a":"1","a":"2"}})", ""),
       absl::StatusCode::kInvalidArgument, "__metadata__: key 'a' appears twice"},
      {"metadata_not_strings", RawSafetensors(R"({"__metadata__":{"step":5}})", ""),
       absl::StatusCode::kInvalidArgument, "__metadata__ must map strings to strings, but 'step' is 5"},
      {"metadata_not_object", RawSafetensors(R"({"__metadata__":"x"})", ""), absl::StatusCode::kInvalidArgument,
       "__metadata__ must be an object of strings, not \"x\""},
  };
}

TEST(SafetensorsReaderTest, CorruptFilesGetClearErrors) {
  const std::string dir = MakeTestDir();
  for (const Corrupt& c : CorruptCases()) {
    SCOPED_TRACE(c.label);
    const std::string path = absl::StrCat(dir, "/", c.label, ".safetensors");
    WriteRaw(path, c.bytes);
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << "expected an error";
    EXPECT_EQ(file.status().code(), c.code) << file.status();
    EXPECT_TRUE(absl::StrContains(file.status().message(), absl::StrCat("safetensors file '", path, "'")))
        << file.status();
    EXPECT_TRUE(absl::StrContains(file.status().message(), c.needle))
        << file.status() << "\n  expected to contain: " << c.needle;
  }
}

TEST(SafetensorsReaderTest, FileSystemErrorsNameTheFile) {
  absl::StatusOr<SafetensorsFile> missing = SafetensorsFile::Open("/nonexistent/model.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "cannot open safetensors file '/nonexistent/model.safetensors': No such file or directory");
  const std::string dir = MakeTestDir();
  absl::StatusOr<SafetensorsFile> folder = SafetensorsFile::Open(dir);
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(folder.status().message(), "is not a regular file")) << folder.status();
}

}  // namespace
}  // namespace colossal::io
