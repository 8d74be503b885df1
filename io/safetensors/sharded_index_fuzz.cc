// libFuzzer target for the sharded-checkpoint index (ShardedSafetensors::Open
// of a folder holding model.safetensors.index.json): the input is the index;
// beside it lie two valid shard files, model-00001-of-00002.safetensors
// (tensors a, b) and model-00002-of-00002.safetensors (c). Any index must
// either open, with every listed name found in a file that holds it, or fail
// with a clean error (InvalidArgument for the index, or the file system's
// NotFound / FailedPrecondition, or the reader's DataLoss for a file it names).
// Run by :sharded_index_fuzz_test (tests/fuzz/fuzz_driver.cc) and by
// tests/fuzz/run_libfuzzer.sh.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "io/safetensors/sharded.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using colossal::fuzz::Check;

void WriteFile(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  Check(fd >= 0, "cannot create a file in the fuzz folder");
  Check(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()), "short write");
  ::close(fd);
}

std::string Safetensors(const std::string& header, size_t data_bytes) {
  std::string h = header;
  while (h.size() % 8 != 0) h += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + std::string(data_bytes, '\x01');
}

// The folder with the two shards, made once per process.
const std::string& Folder() {
  static const std::string folder = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    if (tmp == nullptr) tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/sharded_index_fuzz.XXXXXX";
    Check(::mkdtemp(pattern.data()) != nullptr, "mkdtemp failed");
    WriteFile(pattern + "/model-00001-of-00002.safetensors",
              Safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"U8","shape":[1],"data_offsets":[8,9]}})",
                          9));
    WriteFile(pattern + "/model-00002-of-00002.safetensors",
              Safetensors(R"({"c":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})", 8));
    return pattern;
  }();
  static const bool cleanup_registered = [] {
    std::atexit([] {
      for (const char* name : {"/model-00001-of-00002.safetensors", "/model-00002-of-00002.safetensors",
                               "/model.safetensors.index.json"}) {
        ::unlink((folder + name).c_str());
      }
      ::rmdir(folder.c_str());
    });
    return true;
  }();
  (void)cleanup_registered;
  return folder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& folder = Folder();
  WriteFile(folder + "/model.safetensors.index.json", std::string(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<colossal::io::ShardedSafetensors> ckpt = colossal::io::ShardedSafetensors::Open(folder);
  colossal::fuzz::RecordStatus(ckpt.status(),
                               {absl::StatusCode::kInvalidArgument, absl::StatusCode::kDataLoss,
                                absl::StatusCode::kNotFound, absl::StatusCode::kFailedPrecondition},
                               "");
  if (!ckpt.ok()) return 0;
  Check(ckpt->names().size() == ckpt->size(), "names() and size() disagree");
  for (const std::string& name : ckpt->names()) {
    Check(name == "a" || name == "b" || name == "c", "a tensor that no shard holds");
    const colossal::io::SafetensorsTensor* t = ckpt->Find(name);
    Check(t != nullptr && t->name == name, "a listed tensor is not found");
    unsigned sum = 0;
    for (std::byte b : t->data) sum += static_cast<unsigned>(b);
    Check(sum == t->data.size(), "tensor bytes differ from the shard's");
  }
  return 0;
}
