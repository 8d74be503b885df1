// colossal::io — GPT-2's, Llama 3's and Qwen2's pre-tokenisation: text into the pieces BPE works on.
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

namespace pretokenizer_internal {
// The end of the piece that starts at byte p (< text.size()), per pattern.
size_t Gpt2MatchAt(std::string_view text, size_t p);
size_t Llama3MatchAt(std::string_view text, size_t p);
size_t Qwen2MatchAt(std::string_view text, size_t p);
}  // namespace pretokenizer_internal

// Cuts text into pieces, each ending where `MatchAt` says.
template <size_t (*MatchAt)(std::string_view, size_t)>
class PatternSplitter {
 public:
  explicit PatternSplitter(std::string_view text) : text_(text) {}

  // Sets *piece to the next piece (a view into the text) and returns true, or
  // returns false when the text is exhausted.
  bool Next(std::string_view* piece) {
    if (pos_ >= text_.size()) return false;
    const size_t end = MatchAt(text_, pos_);
    *piece = text_.substr(pos_, end - pos_);
    pos_ = end;
    return true;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

using Gpt2Splitter = PatternSplitter<&pretokenizer_internal::Gpt2MatchAt>;

// All pieces of `text`, as views into it.
std::vector<std::string_view> SplitGpt2(std::string_view text);

// Llama 3's pattern (its tokenizer.json's Split pre-tokenizer, tiktoken's cl100k_base
// pattern with \p{N}{1,3}):
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// by hand, with leftmost-first alternation as in Hugging Face tokenizers'
// engine (Oniguruma), alternative by alternative at each position:
//  1. a contraction, in any case ('S, 'Ll); "'ſ" (U+017F, which case-folds to
//     s) counts as 's, as Oniguruma's case folding has it;
//  2. a run of letters, prefixed by one character that is not \r, \n, a
//     letter or a number (a space, a tab, "(", an emoji ...) when there is one;
//  3. one to three numbers;
//  4. an optional space, a run of symbols (neither space, letter nor number),
//     and the \r and \n characters right after it;
//  5. white space up to and including its last \r or \n;
//  6. white space that leaves its last character to the next piece, unless it
//     ends the text;
//  7. a single white space character.
// Classes, the contract and invalid UTF-8 are as for Gpt2Splitter.
//
//   colossal::io::Llama3Splitter split("Hi!\n\n1234 it'S");   // "Hi", "!\n\n", "123", "4", " it", "'S"
using Llama3Splitter = PatternSplitter<&pretokenizer_internal::Llama3MatchAt>;

std::vector<std::string_view> SplitLlama3(std::string_view text);

// Qwen2's pattern (Qwen2 / Qwen2.5 tokenizer.json): Llama 3's with \p{N} in
// place of \p{N}{1,3}, so every number is a piece of its own ("2024" is four).
//
//   colossal::io::Qwen2Splitter split("Hi 2024");   // "Hi", " ", "2", "0", "2", "4"
using Qwen2Splitter = PatternSplitter<&pretokenizer_internal::Qwen2MatchAt>;

std::vector<std::string_view> SplitQwen2(std::string_view text);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_PRETOKENIZER_H_
