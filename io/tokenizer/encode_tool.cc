// Prints a tokenizer's ids for a text as JSON, for comparing with transformers
// on another machine (tools/hf/llama3_tokenizer_check.py prints theirs):
//
//   bazel build //io/tokenizer:encode_tool
//   bazel-bin/io/tokenizer/encode_tool MODEL_DIR [TEXT_FILE]
//   -> {"tokenizer": "MODEL_DIR/tokenizer.json", "kind": "tokenizer.json",
//       "ids": [128000, ...], "ids_no_special": [...]}
//
// MODEL_DIR is a folder or file LoadTokenizer takes (io/tokenizer/load_tokenizer.h).
// The text is TEXT_FILE's bytes, or with none the mixed-script text that
// tools/hf/llama3_tokenizer_check.py uses. "ids" are Encode(text, true)
// (transformers' tokenizer(text)["input_ids"]), "ids_no_special"
// Encode(text, false).
#include <cstdio>
#include <string>

#include "io/common/file_util.h"
#include "io/tokenizer/load_tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

// The same text as tools/hf/llama3_tokenizer_check.py's TEXT.
constexpr char kMixedText[] =
    "<|begin_of_text|>Hello, world! I'm sure you'll see THEY'VE said it's 2024-05-20: "
    "1234567 apples cost $3.14159.\n\n\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD"
    "\xE3\x82\xB9\xE3\x83\x88\xE3\x81\xA8\xE4\xB8\xAD\xE6\x96\x87\xEF\xBC\x8C\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4"
    " too.\r\nEmoji: \xF0\x9F\x99\x82\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7!\tTabs\t\t"
    "and   spaces   \n  \n<|eot_id|>\xC3\x9Cn\xC3\xAF\x63\xC3\xB6\x64\xC3\xA9 caf\xC3\xA9 na\xC3\xAFve "
    "\xCE\x95\xCE\xBB\xCE\xBB\xCE\xB7\xCE\xBD\xCE\xB9\xCE\xBA\xCE\xAC \xD1\x80\xD1\x83\xD1\x81\xD1\x81\xD0\xBA"
    "\xD0\xB8\xD0\xB9 \xD7\xA2\xD7\x91\xD7\xA8\xD7\x99\xD7\xAA \xD8\xA7\xD9\x84\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A"
    "\xD8\xA9 \xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4 \xE2\x85\xBB<|end_of_text|>";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR|TOKENIZER_FILE [TEXT_FILE]\n", argv[0]);
    return 2;
  }
  std::string text = kMixedText;
  if (argc == 3) {
    absl::StatusOr<std::string> contents = colossal::io::ReadFileToString(argv[2]);
    if (!contents.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(contents.status().message()).c_str());
      return 1;
    }
    text = *std::move(contents);
  }
  absl::StatusOr<std::unique_ptr<colossal::io::TextTokenizer>> tok = colossal::io::LoadTokenizer(argv[1]);
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(text, true);
  absl::StatusOr<std::vector<int32_t>> plain = (*tok)->Encode(text, false);
  if (!ids.ok() || !plain.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string((ids.ok() ? plain : ids).status().message()).c_str());
    return 1;
  }
  nlohmann::ordered_json out = {{"tokenizer", (*tok)->path()},
                                {"kind", (*tok)->kind()},
                                {"ids", *ids},
                                {"ids_no_special", *plain}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
