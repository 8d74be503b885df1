// colossal::io — GPT-2's pre-tokenisation: text into the pieces BPE works on.
//
// GPT-2 (and tiktoken's "gpt2"/r50k_base encoding) first cuts text with
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// and then runs byte-level BPE inside each piece; no token spans two pieces.
// Gpt2Splitter implements that pattern by hand (no regex engine), with the
// same leftmost-first alternation and backtracking results as tiktoken's
// engine: contractions (lower case only) first; then an optional single space
// joined to a run of letters, of numbers, or of other symbols; white space
// runs leave their last character to join the next word (" " + "word"),
// except at the end of the text, where the whole run is one piece.
//
//   colossal::io::Gpt2Splitter split("Hello  world's 42!\n");
//   std::string_view piece;
//   while (split.Next(&piece)) { ... }   // "Hello", " ", " world", "'s", " 42", "!", "\n"
//
// Contract: the pieces are non-empty, in order, and concatenate to the input
// exactly. Letters, numbers and white space follow unicode_class.h (Unicode
// 16.0.0). Input need not be valid UTF-8: each invalid byte is a symbol of
// its own (class "other", like U+FFFD), so any byte string splits losslessly;
// tiktoken itself only ever sees valid UTF-8, where the two agree.
#ifndef COLOSSAL_IO_TOKENIZER_PRETOKENIZER_H_
#define COLOSSAL_IO_TOKENIZER_PRETOKENIZER_H_

#include <cstddef>
#include <string_view>
#include <vector>

namespace colossal::io {

class Gpt2Splitter {
 public:
  explicit Gpt2Splitter(std::string_view text) : text_(text) {}

  // Sets *piece to the next piece (a view into the text) and returns true, or
  // returns false when the text is exhausted.
  bool Next(std::string_view* piece) {
    if (pos_ >= text_.size()) return false;
    const size_t end = MatchAt(pos_);
    *piece = text_.substr(pos_, end - pos_);
    pos_ = end;
    return true;
  }

 private:
  // The end of the piece that starts at byte p (< text_.size()).
  size_t MatchAt(size_t p) const;

  std::string_view text_;
  size_t pos_ = 0;
};

// All pieces of `text`, as views into it.
std::vector<std::string_view> SplitGpt2(std::string_view text);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_PRETOKENIZER_H_
