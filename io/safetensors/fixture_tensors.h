// Test helper: the tensors of testdata/python_fixture.safetensors, which
// tools/data/make_safetensors_fixture.py writes with Hugging Face's
// safetensors package (its TENSORS table lists the same names, shapes and
// values), as SafetensorsEntry values for writing and for comparing.
#ifndef COLOSSAL_IO_SAFETENSORS_FIXTURE_TENSORS_H_
#define COLOSSAL_IO_SAFETENSORS_FIXTURE_TENSORS_H_

#include <string>
#include <vector>

#include "io/safetensors/reader.h"
#include "io/safetensors/writer.h"

namespace colossal::io {

struct FixtureTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;  // little-endian element bytes

  SafetensorsEntry Entry() const { return {name, dtype, shape, bytes.data(), bytes.size()}; }
};

// In the order of make_safetensors_fixture.py's TENSORS.
std::vector<FixtureTensor> FixtureTensors();

// The fixture file's __metadata__.
SafetensorsMetadata FixtureMetadata();

inline constexpr char kPythonFixturePath[] = "io/safetensors/testdata/python_fixture.safetensors";

}  // namespace colossal::io

#endif  // COLOSSAL_IO_SAFETENSORS_FIXTURE_TENSORS_H_
