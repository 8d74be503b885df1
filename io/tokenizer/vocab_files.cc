#include "io/tokenizer/vocab_files.h"

#include <algorithm>
#include <array>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "io/common/absl_view.h"
#include "io/common/file_util.h"
#include "io/tokenizer/unicode_class.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

// GPT-2's bytes_to_unicode, and the data gym's base ranks: bytes ordered by
// their stand-in code point (printable bytes first, then the rest).
struct ByteEncoding {
  std::array<char32_t, 256> byte_to_unicode{};
  std::array<int16_t, 0x144> unicode_to_byte{};  // -1: no byte
  std::array<uint8_t, 256> byte_of_base_rank{};

  ByteEncoding() {
    unicode_to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_to_unicode[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + extra++);
      unicode_to_byte[byte_to_unicode[b]] = static_cast<int16_t>(b);
    }
    int rank = 0;
    for (char32_t cp = 0; cp < unicode_to_byte.size(); ++cp) {
      if (unicode_to_byte[cp] >= 0) byte_of_base_rank[rank++] = static_cast<uint8_t>(unicode_to_byte[cp]);
    }
  }
};

const ByteEncoding& Bytes() {
  static const ByteEncoding* const encoding = new ByteEncoding();
  return *encoding;
}

// Splits on '\n', dropping one trailing '\r' per line; calls fn(line, line_no).
template <typename Fn>
absl::Status ForEachLine(std::string_view contents, Fn fn) {
  int line_no = 0;
  for (absl::string_view piece : absl::StrSplit(ToAbsl(contents), '\n')) {
    std::string_view line = FromAbsl(piece);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    absl::Status status = fn(line, line_no);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status LineError(std::string_view source, int line_no, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(ToAbsl(source), ":", line_no, ": ", ToAbsl(what)));
}

// `s` for an error message: at most 60 bytes, as is when it is printable
// UTF-8, C-escaped otherwise.
std::string Shorten(std::string_view s) {
  constexpr size_t kMax = 60;
  const bool cut = s.size() > kMax;
  if (cut) s = s.substr(0, kMax);
  bool printable = true;
  for (size_t pos = 0; pos < s.size() && printable;) {
    const Utf8Char ch = DecodeUtf8(s, pos);
    printable = ch.valid && ch.codepoint >= 0x20 && ch.codepoint != 0x7F;
    pos += ch.length;
  }
  return (printable ? std::string(s) : absl::CHexEscape(ToAbsl(s))) + (cut ? "..." : "");
}

bool IsDataGymSpecial(std::string_view key) { return key == "<|endoftext|>" || key == "<|startoftext|>"; }

}  // namespace

char32_t Gpt2ByteToUnicode(uint8_t b) { return Bytes().byte_to_unicode[b]; }

std::optional<uint8_t> Gpt2UnicodeToByte(char32_t cp) {
  if (cp >= Bytes().unicode_to_byte.size() || Bytes().unicode_to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(Bytes().unicode_to_byte[cp]);
}

std::string Gpt2ByteEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const char32_t cp = Gpt2ByteToUnicode(static_cast<uint8_t>(c));
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {  // all stand-ins are below U+0800: two bytes
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

absl::StatusOr<std::string> Gpt2ByteDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char ch = DecodeUtf8(text, pos);
    if (!ch.valid) {
      return absl::InvalidArgumentError(
          absl::StrFormat("invalid UTF-8 at byte %d of \"%s\"", pos, Shorten(text)));
    }
    const std::optional<uint8_t> b = Gpt2UnicodeToByte(ch.codepoint);
    if (!b) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "U+%04X in \"%s\" stands for no byte in GPT-2's byte encoding", static_cast<uint32_t>(ch.codepoint),
          Shorten(text)));
    }
    out.push_back(static_cast<char>(*b));
    pos += ch.length;
  }
  return out;
}

absl::StatusOr<BpeRanks> ParseTiktokenRanks(std::string_view contents, std::string_view source) {
  BpeRanks ranks;
  absl::Status status = ForEachLine(contents, [&](std::string_view line, int line_no) -> absl::Status {
    if (line.empty()) return absl::OkStatus();
    const std::vector<absl::string_view> fields = absl::StrSplit(ToAbsl(line), ' ', absl::SkipEmpty());
    if (fields.size() != 2) {
      return LineError(source, line_no,
                       absl::StrCat("expected '<base64 token> <rank>', got \"", Shorten(line), "\""));
    }
    std::string bytes;
    if (!absl::Base64Unescape(fields[0], &bytes) || bytes.empty()) {
      return LineError(source, line_no, absl::StrCat("token '", Shorten(FromAbsl(fields[0])), "' is not non-empty base64"));
    }
    int64_t rank = -1;
    if (!absl::SimpleAtoi(fields[1], &rank) || rank < 0 || rank > kMaxBpeRank) {
      return LineError(source, line_no,
                       absl::StrCat("rank '", Shorten(FromAbsl(fields[1])), "' is not an integer in [0, ", kMaxBpeRank, "]"));
    }
    ranks.emplace_back(std::move(bytes), static_cast<int32_t>(rank));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  if (ranks.empty()) return absl::InvalidArgumentError(absl::StrCat(ToAbsl(source), ": no ranks (empty file?)"));
  return ranks;
}

absl::StatusOr<BpeRanks> ReadTiktokenRanks(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  if (!contents.ok()) return contents.status();
  return ParseTiktokenRanks(*contents, path);
}

absl::StatusOr<BpeRanks> ParseDataGymRanks(std::string_view encoder_json, std::string_view encoder_json_source,
                                           std::string_view vocab_bpe, std::string_view vocab_bpe_source) {
  // vocab.bpe: the 256 bytes, then one rank per merge.
  BpeRanks ranks;
  absl::flat_hash_map<std::string, int> line_of;  // token -> vocab.bpe line (0: a base byte)
  for (int r = 0; r < 256; ++r) {
    ranks.emplace_back(std::string(1, static_cast<char>(Bytes().byte_of_base_rank[r])), r);
    line_of[ranks.back().first] = 0;
  }
  absl::Status status = ForEachLine(vocab_bpe, [&](std::string_view line, int line_no) -> absl::Status {
    if (line.empty() || (line_no == 1 && absl::StartsWith(ToAbsl(line), "#version"))) return absl::OkStatus();
    const std::vector<absl::string_view> fields = absl::StrSplit(ToAbsl(line), ' ');
    if (fields.size() != 2 || fields[0].empty() || fields[1].empty()) {
      return LineError(vocab_bpe_source, line_no,
                       absl::StrCat("expected a merge '<left> <right>', got \"", Shorten(line), "\""));
    }
    std::string merged;
    for (absl::string_view field : fields) {
      absl::StatusOr<std::string> bytes = Gpt2ByteDecode(FromAbsl(field));
      if (!bytes.ok()) return LineError(vocab_bpe_source, line_no, FromAbsl(bytes.status().message()));
      merged += *bytes;
    }
    const auto [it, inserted] = line_of.emplace(merged, line_no);
    if (!inserted) {
      return LineError(vocab_bpe_source, line_no,
                       it->second == 0 ? absl::StrCat("merge \"", Shorten(line), "\" makes a single byte")
                                       : absl::StrCat("merge \"", Shorten(line), "\" makes the same token as line ",
                                                      it->second));
    }
    if (ranks.size() > static_cast<size_t>(kMaxBpeRank)) {
      return LineError(vocab_bpe_source, line_no, absl::StrCat("more than ", kMaxBpeRank, " ranks"));
    }
    ranks.emplace_back(std::move(merged), static_cast<int32_t>(ranks.size()));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;

  // encoder.json must hold exactly these tokens with these ids.
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(encoder_json);
  } catch (const nlohmann::json::parse_error& e) {
    const size_t upto = std::min<size_t>(e.byte, encoder_json.size());
    const int line_no = 1 + static_cast<int>(std::count(encoder_json.begin(), encoder_json.begin() + upto, '\n'));
    return LineError(encoder_json_source, line_no, absl::StrCat("invalid JSON: ", e.what()));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(encoder_json_source), ": expected a JSON object of token -> id"));
  }
  absl::flat_hash_map<absl::string_view, int32_t> rank_of;
  for (const auto& [bytes, rank] : ranks) rank_of[bytes] = rank;
  size_t matched = 0;
  for (const auto& [key, value] : json.items()) {
    if (IsDataGymSpecial(key)) continue;
    if (!value.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(ToAbsl(encoder_json_source), ": the id of \"", Shorten(key), "\" is not an integer"));
    }
    absl::StatusOr<std::string> bytes = Gpt2ByteDecode(key);
    if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat(ToAbsl(encoder_json_source), ": ", bytes.status().message()));
    const auto it = rank_of.find(*bytes);
    const int64_t id = value.get<int64_t>();
    if (it == rank_of.end() || it->second != id) {
      return absl::InvalidArgumentError(absl::StrCat(
          ToAbsl(encoder_json_source), " and ", ToAbsl(vocab_bpe_source), " disagree: \"", Shorten(key), "\" has id ", id,
          it == rank_of.end() ? absl::StrCat(" but no merge makes it")
                              : absl::StrCat(" but rank ", it->second, " from the merges")));
    }
    ++matched;
  }
  if (matched != ranks.size()) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(encoder_json_source), " has ", matched, " tokens but ",
                                                   ToAbsl(vocab_bpe_source), " makes ", ranks.size(),
                                                   " (256 bytes + merges)"));
  }
  return ranks;
}

absl::StatusOr<BpeRanks> ReadDataGymRanks(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
  absl::StatusOr<std::string> encoder_json = ReadFileToString(encoder_json_path);
  if (!encoder_json.ok()) return encoder_json.status();
  absl::StatusOr<std::string> vocab_bpe = ReadFileToString(vocab_bpe_path);
  if (!vocab_bpe.ok()) return vocab_bpe.status();
  return ParseDataGymRanks(*encoder_json, encoder_json_path, *vocab_bpe, vocab_bpe_path);
}

}  // namespace colossal::io
