#include "io/tokenizer/pretokenizer.h"

#include "io/tokenizer/unicode_class.h"

namespace colossal::io {
namespace {

struct Classified {
  CharClass cls;
  size_t length;
};

// Class and byte length of the character at text[p]; an invalid byte is one
// character of class kOther.
inline Classified ClassAt(std::string_view text, size_t p) {
  const auto b = static_cast<unsigned char>(text[p]);
  if (b < 0x80) return {unicode_internal::kAsciiClass[b], 1};
  const Utf8Char ch = DecodeUtf8(text, p);
  return {ch.valid ? ClassifyCodepoint(ch.codepoint) : CharClass::kOther, ch.length};
}

// The end of the maximal run of class `cls` starting at byte p.
inline size_t RunEnd(std::string_view text, size_t p, CharClass cls) {
  while (p < text.size()) {
    const Classified c = ClassAt(text, p);
    if (c.cls != cls) break;
    p += c.length;
  }
  return p;
}

// 's 't 'm 'd 're 've 'll at p: the end of the contraction, or 0 if none.
inline size_t ContractionEnd(std::string_view text, size_t p) {
  if (text[p] != '\'' || p + 1 >= text.size()) return 0;
  const char c1 = text[p + 1];
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return p + 2;
  if (p + 2 >= text.size()) return 0;
  const char c2 = text[p + 2];
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
    return p + 3;
  }
  return 0;
}

}  // namespace

size_t Gpt2Splitter::MatchAt(size_t p) const {
  const size_t n = text_.size();
  // 's|'t|'re|'ve|'m|'ll|'d
  if (const size_t end = ContractionEnd(text_, p)) return end;

  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+  — a space joins a following non-space run.
  Classified first = ClassAt(text_, p);
  size_t run_start = p;
  if (text_[p] == ' ' && p + 1 < n) {
    const Classified next = ClassAt(text_, p + 1);
    if (next.cls != CharClass::kSpace) {
      first = next;
      run_start = p + 1;
    }
  }
  if (first.cls != CharClass::kSpace) {
    return RunEnd(text_, run_start + first.length, first.cls);
  }

  // \s+(?!\S) | \s+ — a white space run; before a non-space character it gives
  // up its last character (which then prefixes the next piece), unless that
  // would leave it empty.
  size_t end = p;
  size_t last = p;
  while (end < n) {
    const Classified c = ClassAt(text_, end);
    if (c.cls != CharClass::kSpace) break;
    last = end;
    end += c.length;
  }
  if (end == n || last == p) return end;
  return last;
}

std::vector<std::string_view> SplitGpt2(std::string_view text) {
  std::vector<std::string_view> pieces;
  Gpt2Splitter split(text);
  std::string_view piece;
  while (split.Next(&piece)) pieces.push_back(piece);
  return pieces;
}

}  // namespace colossal::io
