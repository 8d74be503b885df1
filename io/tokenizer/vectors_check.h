// colossal::io (tests) — checks a Tokenizer against a test-vector file.
//
// The files are written by tools/data/make_gpt2_vectors.py from tiktoken: a
// JSON object {"meta": {...}, "cases": [{"name", "text", "ordinary", "allow",
// "rejects"}]}. For every case this expects EncodeOrdinary, Encode(kAllow) and
// Encode(kReject) to give tiktoken's ids (or its error), and Decode to give
// the text back byte for byte.
//
//   ExpectTokenizerMatchesVectors(tokenizer, "io/tokenizer/testdata/tiny_vectors.json");
#ifndef COLOSSAL_IO_TOKENIZER_VECTORS_CHECK_H_
#define COLOSSAL_IO_TOKENIZER_VECTORS_CHECK_H_

#include <string>

#include "io/tokenizer/tokenizer.h"

namespace colossal::io {

// Adds a GoogleTest failure per mismatching case (the first 20 in full).
// Returns the number of cases checked.
int ExpectTokenizerMatchesVectors(const Tokenizer& tokenizer, const std::string& path);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_VECTORS_CHECK_H_
