// The TcpStore wire format. Internal to comm/store.
//
// Every message is a frame: a little-endian uint32 length, then that many
// bytes of body. A request body is a command byte and its arguments; a reply
// body is a status byte and a payload. Strings are a uint32 length and the
// bytes; integers are little-endian int64.
//
//   kSet      key value                 -> kOk
//   kGet      key timeout_ms            -> kOk value | kTimeout
//   kAdd      key delta                 -> kOk new_value(int64) | kError message
//   kCompare  key expected desired      -> kOk value_after
//   kWait     count key... timeout_ms   -> kOk | kTimeout count missing_key...
//   kCheck    count key...              -> kOk int64(0/1)
//   kDelete   key                       -> kOk int64(0/1)
//   kNumKeys                            -> kOk int64
// timeout_ms < 0 waits forever.
#ifndef COLOSSAL_COMM_STORE_TCP_STORE_PROTOCOL_H_
#define COLOSSAL_COMM_STORE_TCP_STORE_PROTOCOL_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace colossal::comm::store_protocol {

enum class Command : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCompare = 4,
  kWait = 5,
  kCheck = 6,
  kDelete = 7,
  kNumKeys = 8,
};

enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// Frames larger than this are a protocol error (a corrupt or foreign peer).
inline constexpr uint32_t kMaxFrameBytes = 1u << 30;

class Writer {
 public:
  Writer& u8(uint8_t v) {
    body_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& i64(int64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
    body_.append(b, 8);
    return *this;
  }
  Writer& str(absl::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    body_.append(s.data(), s.size());
    return *this;
  }
  // The frame: length prefix + body.
  std::string frame() const {
    std::string out;
    const uint32_t n = static_cast<uint32_t>(body_.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    out += body_;
    return out;
  }

 private:
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) body_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string body_;
};

// Reads a body; every accessor returns nullopt past the end (a malformed frame).
class Reader {
 public:
  explicit Reader(absl::string_view body) : body_(body) {}
  std::optional<uint8_t> u8() {
    if (pos_ + 1 > body_.size()) return std::nullopt;
    return static_cast<uint8_t>(body_[pos_++]);
  }
  std::optional<int64_t> i64() {
    if (pos_ + 8 > body_.size()) return std::nullopt;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(body_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return static_cast<int64_t>(v);
  }
  std::optional<std::string> str() {
    if (pos_ + 4 > body_.size()) return std::nullopt;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(body_[pos_ + i])) << (8 * i);
    pos_ += 4;
    if (pos_ + n > body_.size()) return std::nullopt;
    std::string s(body_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool at_end() const { return pos_ == body_.size(); }

 private:
  absl::string_view body_;
  size_t pos_ = 0;
};

// The frame length encoded in the first 4 bytes of `p`.
inline uint32_t frame_length(const char* p) {
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return n;
}

}  // namespace colossal::comm::store_protocol

#endif  // COLOSSAL_COMM_STORE_TCP_STORE_PROTOCOL_H_
