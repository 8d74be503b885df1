// libFuzzer target for the safetensors reader (SafetensorsFile::Open): header
// length, JSON header, dtypes, shapes, data_offsets and the data layout.
// Any input must either open, with every tensor's bytes inside the data
// section, covering it exactly, sized by dtype and shape, or fail with
// InvalidArgument / DataLoss naming the file. Run by :safetensors_fuzz_test
// (tests/fuzz/fuzz_driver.cc) and by tests/fuzz/run_libfuzzer.sh.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "io/safetensors/reader.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using colossal::fuzz::Check;
  colossal::fuzz::MemoryFile file(data, size);
  absl::StatusOr<colossal::io::SafetensorsFile> st = colossal::io::SafetensorsFile::Open(file.path());
  colossal::fuzz::RecordStatus(st.status(), {absl::StatusCode::kInvalidArgument, absl::StatusCode::kDataLoss},
                               "safetensors file '" + file.path() + "'");
  if (!st.ok()) return 0;

  Check(st->file_bytes() == size, "file_bytes differs from the input size");
  Check(st->data_start() <= size, "data_start past the end of the file");
  const uint64_t data_bytes = size - st->data_start();
  uint64_t covered = 0;
  unsigned checksum = 0;
  for (const colossal::io::SafetensorsTensor& t : st->tensors()) {
    Check(t.begin == covered, "tensors do not cover the data contiguously in order");
    Check(t.end >= t.begin && t.end <= data_bytes, "data_offsets outside the data");
    Check(t.data.size() == t.end - t.begin, "data span size differs from data_offsets");
    // The bytes must be readable (ASan / the mapping) and sized by dtype and shape.
    for (std::byte b : t.data) checksum += static_cast<unsigned>(b);
    const int64_t n = t.num_elements();
    Check(n >= 0, "negative element count");
    Check(static_cast<uint64_t>(n) * static_cast<uint64_t>(t.dtype_bits) == 8 * t.data.size(),
          "byte size disagrees with dtype and shape");
    absl::StatusOr<const colossal::io::SafetensorsTensor*> found = st->Get(t.name);
    Check(found.ok() && *found == &t, "Get does not find a listed tensor");
    covered = t.end;
  }
  Check(covered == data_bytes, "bytes after the last tensor");
  // The data's bytes must equal the input's bytes at the same offsets.
  for (const colossal::io::SafetensorsTensor& t : st->tensors()) {
    for (size_t i = 0; i < t.data.size(); i += 1 + t.data.size() / 8) {
      Check(static_cast<uint8_t>(t.data[i]) == data[st->data_start() + t.begin + i], "tensor bytes differ");
    }
  }
  (void)checksum;
  return 0;
}
