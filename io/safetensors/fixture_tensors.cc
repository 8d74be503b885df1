#include "io/safetensors/fixture_tensors.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace colossal::io {
namespace {

template <typename T>
std::string Bytes(std::initializer_list<T> values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.begin(), out.size());  // the tests run on little-endian hosts
  return out;
}

template <typename T>
std::string Iota(int n, T scale, T offset) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    const T v = static_cast<T>(i) * scale + offset;
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  return out;
}

}  // namespace

std::vector<FixtureTensor> FixtureTensors() {
  return {
      {"f32", "F32", {2, 3}, Iota<float>(6, 0.5f, -1.0f)},
      // -1, -0.5, 0, 0.5, 1, 1.5 as IEEE half
      {"f16", "F16", {3, 2}, Bytes<uint16_t>({0xBC00, 0xB800, 0x0000, 0x3800, 0x3C00, 0x3E00})},
      // 1, -2, 0.5, 3.140625 as bfloat16
      {"bf16", "BF16", {4}, Bytes<uint16_t>({0x3F80, 0xC000, 0x3F00, 0x4049})},
      {"f64", "F64", {1, 2}, Bytes<double>({1e100, -2.5})},
      {"i32", "I32", {5}, Bytes<int32_t>({-2, -1, 0, 1, 2})},
      {"i64", "I64", {2}, Bytes<int64_t>({-(int64_t{1} << 40), int64_t{1} << 40})},
      {"u8", "U8", {7}, Bytes<uint8_t>({0, 1, 2, 3, 4, 5, 6})},
      {"u16", "U16", {3}, Bytes<uint16_t>({0, 65535, 12345})},
      {"i8", "I8", {2}, Bytes<int8_t>({-128, 127})},
      {"bool", "BOOL", {3}, Bytes<uint8_t>({1, 0, 1})},
      {"scalar", "F32", {}, Bytes<float>({3.25f})},
      {"empty", "F32", {0, 4}, ""},
      {"model.layers.0.weight", "F32", {2, 3, 4}, Iota<float>(24, 1.0f, 0.0f)},
  };
}

SafetensorsMetadata FixtureMetadata() {
  return {{"format", "np"}, {"made_by", "tools/data/make_safetensors_fixture.py"}};
}

}  // namespace colossal::io
