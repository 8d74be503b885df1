// Writes safetensors files with colossal's writer for Hugging Face's Python
// package to read (tools/data/check_safetensors_interop.py):
//
//   bazel build //io/safetensors:write_interop_files
//   bazel-bin/io/safetensors/write_interop_files /tmp/interop
//   python3 tools/data/check_safetensors_interop.py /tmp/interop
//
// <out>/colossal.safetensors   the tensors of testdata/python_fixture.safetensors
// <out>/sharded/               the same, split into 64-byte shards with an index
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "io/safetensors/fixture_tensors.h"
#include "io/safetensors/sharded.h"
#include "io/safetensors/writer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  ::mkdir(out.c_str(), 0755);
  ::mkdir((out + "/sharded").c_str(), 0755);
  const std::vector<colossal::io::FixtureTensor> tensors = colossal::io::FixtureTensors();
  std::vector<colossal::io::SafetensorsEntry> entries;
  for (const colossal::io::FixtureTensor& t : tensors) entries.push_back(t.Entry());
  absl::Status s = colossal::io::WriteSafetensors(out + "/colossal.safetensors", entries, colossal::io::FixtureMetadata());
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  colossal::io::ShardedWriteOptions options;
  options.max_shard_bytes = 64;
  absl::StatusOr<colossal::io::ShardedWriteResult> sharded =
      colossal::io::WriteShardedSafetensors(out + "/sharded", entries, colossal::io::FixtureMetadata(), options);
  if (!sharded.ok()) {
    std::fprintf(stderr, "%s\n", sharded.status().ToString().c_str());
    return 1;
  }
  std::printf("wrote %s/colossal.safetensors and %zu shards in %s/sharded\n", out.c_str(), sharded->files.size(),
              out.c_str());
  return 0;
}
