// colossal::io — Unicode Normalization Form C, the normalizer of Qwen2's
// tokenizer.json ({"type": "NFC"}), through Debian's utf8proc.
//
// Hugging Face tokenizers normalizes the text between special tokens before
// pre-tokenizing it; a tokenizer trained that way has seen "é" only as
// U+00E9, never as "e" + U+0301, so both must become the same ids.
//
//   std::string scratch;
//   std::string_view nfc = colossal::io::ToNfc("cafe\u0301", &scratch);   // "caf\u00e9"
//
// Contract: valid UTF-8 runs become their NFC form (utf8proc's tables:
// Unicode 15.0 in Debian 12); each byte that is not valid UTF-8
// (unicode_class.h's DecodeUtf8) stays as it is, so any byte string
// normalizes without loss of what is not text. Text with no byte >= 0xCC
// (no code point from U+0300, where combining marks begin) is NFC already
// and comes back as the same view without work.
#ifndef COLOSSAL_IO_TOKENIZER_NFC_H_
#define COLOSSAL_IO_TOKENIZER_NFC_H_

#include <string>
#include <string_view>

namespace colossal::io {

// `text` in NFC: either `text` itself or a view of *scratch (overwritten).
std::string_view ToNfc(std::string_view text, std::string* scratch);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_NFC_H_
