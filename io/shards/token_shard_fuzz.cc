// libFuzzer target for llm.c token shards (TokenShard::Open): the 1024-byte
// header (magic, version, count) against the file size, uint16 and uint32 tokens. Any input must either
// open with exactly the tokens the header counts, or fail with
// InvalidArgument / DataLoss naming the file; the outcome must agree with an
// independent reading of the format (token_shard.h). Run by
// :token_shard_fuzz_test (tests/fuzz/fuzz_driver.cc) and by
// tests/fuzz/run_libfuzzer.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "io/shards/token_shard.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using colossal::fuzz::Check;
  namespace io = colossal::io;
  colossal::fuzz::MemoryFile file(data, size);
  absl::StatusOr<io::TokenShard> shard = io::TokenShard::Open(file.path());
  colossal::fuzz::RecordStatus(shard.status(), {absl::StatusCode::kInvalidArgument, absl::StatusCode::kDataLoss},
                               "token shard '" + file.path() + "'");

  // The format, read independently: (20240520, 1) uint16, (20240801, 7) uint32.
  bool valid = size >= io::kTokenShardHeaderBytes;
  int32_t header[3] = {};
  uint64_t width = 0;
  if (valid) {
    std::memcpy(header, data, sizeof(header));
    if (header[0] == 20240520 && header[1] == 1) width = 2;
    if (header[0] == 20240801 && header[1] == 7) width = 4;
    valid = width != 0 && header[2] >= 0 &&
            size - io::kTokenShardHeaderBytes == width * static_cast<uint64_t>(header[2]);
  }
  Check(shard.ok() == valid, shard.ok() ? "accepted an invalid shard" : "rejected a valid shard");
  if (!shard.ok()) return 0;

  Check(shard->num_tokens() == header[2], "num_tokens differs from the header");
  Check(static_cast<uint64_t>(shard->width()) == width, "the width differs from the header");
  Check(shard->tokens16().size() + shard->tokens32().size() == static_cast<size_t>(header[2]),
        "the tokens' size differs from the header");
  for (int64_t i = 0; i < shard->num_tokens(); ++i) {
    uint32_t want = 0;
    std::memcpy(&want, data + io::kTokenShardHeaderBytes + width * static_cast<uint64_t>(i), width);
    Check(shard->token(i) == static_cast<int32_t>(want), "a token differs from the file");
  }
  return 0;
}
