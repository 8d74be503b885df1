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

// Llama 3's contractions, in any case: the end of the contraction at p, or 0.
// U+017F (LATIN SMALL LETTER LONG S, UTF-8 C5 BF) folds to 's'.
inline size_t CaseInsensitiveContractionEnd(std::string_view text, size_t p) {
  if (text[p] != '\'' || p + 1 >= text.size()) return 0;
  auto lower = [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c); };
  const char c1 = lower(text[p + 1]);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return p + 2;
  if (text[p + 1] == '\xC5' && p + 2 < text.size() && text[p + 2] == '\xBF') return p + 3;  // 'ſ
  if (p + 2 >= text.size()) return 0;
  const char c2 = lower(text[p + 2]);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return p + 3;
  return 0;
}

inline bool IsCrLf(char c) { return c == '\r' || c == '\n'; }

// The end of a run of at most `max` characters of class `cls` from p.
inline size_t BoundedRunEnd(std::string_view text, size_t p, CharClass cls, int max) {
  for (int i = 0; i < max && p < text.size(); ++i) {
    const Classified c = ClassAt(text, p);
    if (c.cls != cls) break;
    p += c.length;
  }
  return p;
}

template <typename Splitter>
std::vector<std::string_view> SplitAll(std::string_view text) {
  std::vector<std::string_view> pieces;
  Splitter split(text);
  std::string_view piece;
  while (split.Next(&piece)) pieces.push_back(piece);
  return pieces;
}

}  // namespace

namespace pretokenizer_internal {

size_t Gpt2MatchAt(std::string_view text, size_t p) {
  const size_t n = text.size();
  // 's|'t|'re|'ve|'m|'ll|'d
  if (const size_t end = ContractionEnd(text, p)) return end;

  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+  — a space joins a following non-space run.
  Classified first = ClassAt(text, p);
  size_t run_start = p;
  if (text[p] == ' ' && p + 1 < n) {
    const Classified next = ClassAt(text, p + 1);
    if (next.cls != CharClass::kSpace) {
      first = next;
      run_start = p + 1;
    }
  }
  if (first.cls != CharClass::kSpace) {
    return RunEnd(text, run_start + first.length, first.cls);
  }

  // \s+(?!\S) | \s+ — a white space run; before a non-space character it gives
  // up its last character (which then prefixes the next piece), unless that
  // would leave it empty.
  size_t end = p;
  size_t last = p;
  while (end < n) {
    const Classified c = ClassAt(text, end);
    if (c.cls != CharClass::kSpace) break;
    last = end;
    end += c.length;
  }
  if (end == n || last == p) return end;
  return last;
}

namespace {

// Llama 3's pattern with \p{N}{1,max_digits} as its third alternative.
template <int kMaxDigits>
size_t Cl100kStyleMatchAt(std::string_view text, size_t p) {
  const size_t n = text.size();
  // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (const size_t end = CaseInsensitiveContractionEnd(text, p)) return end;

  const Classified first = ClassAt(text, p);
  // 2. [^\r\n\p{L}\p{N}]?\p{L}+
  if (first.cls == CharClass::kLetter) return RunEnd(text, p + first.length, CharClass::kLetter);
  if (first.cls != CharClass::kNumber && !IsCrLf(text[p]) && p + first.length < n) {
    const Classified next = ClassAt(text, p + first.length);
    if (next.cls == CharClass::kLetter) {
      return RunEnd(text, p + first.length + next.length, CharClass::kLetter);
    }
  }
  // 3. \p{N}{1,3} (Qwen2: \p{N})
  if (first.cls == CharClass::kNumber) return BoundedRunEnd(text, p, CharClass::kNumber, kMaxDigits);
  // 4.  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t symbols = first.cls == CharClass::kOther ? p : n;
  if (text[p] == ' ' && p + 1 < n && ClassAt(text, p + 1).cls == CharClass::kOther) symbols = p + 1;
  if (symbols < n) {
    size_t end = RunEnd(text, symbols, CharClass::kOther);
    while (end < n && IsCrLf(text[end])) ++end;
    return end;
  }
  // Here text[p] is white space. W = [p, end) is its maximal run.
  size_t end = p;
  size_t last = p;        // start of W's last character
  size_t after_crlf = p;  // just after W's last \r or \n; p if none
  while (end < n) {
    const Classified c = ClassAt(text, end);
    if (c.cls != CharClass::kSpace) break;
    last = end;
    end += c.length;
    if (IsCrLf(text[last])) after_crlf = end;
  }
  // 5. \s*[\r\n]+
  if (after_crlf != p) return after_crlf;
  // 6. \s+(?!\S), 7. \s+
  if (end == n || last == p) return end;
  return last;
}

}  // namespace

size_t Llama3MatchAt(std::string_view text, size_t p) { return Cl100kStyleMatchAt<3>(text, p); }
size_t Qwen2MatchAt(std::string_view text, size_t p) { return Cl100kStyleMatchAt<1>(text, p); }

}  // namespace pretokenizer_internal

std::vector<std::string_view> SplitGpt2(std::string_view text) { return SplitAll<Gpt2Splitter>(text); }
std::vector<std::string_view> SplitLlama3(std::string_view text) { return SplitAll<Llama3Splitter>(text); }
std::vector<std::string_view> SplitQwen2(std::string_view text) { return SplitAll<Qwen2Splitter>(text); }

}  // namespace colossal::io
