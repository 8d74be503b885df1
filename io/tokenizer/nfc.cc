#include "io/tokenizer/nfc.h"

#include <cstdlib>

#include "io/tokenizer/unicode_class.h"
#include "utf8proc.h"

namespace colossal::io {
namespace {

// Appends the NFC form of `run`, which is valid UTF-8.
void AppendNfc(std::string_view run, std::string* out) {
  if (run.empty()) return;
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                   static_cast<utf8proc_ssize_t>(run.size()), &mapped,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (length < 0) {
    // Only out-of-memory is left for valid UTF-8: keep the text unchanged
    // rather than lose it.
    out->append(run);
  } else {
    out->append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(length));
  }
  std::free(mapped);
}

}  // namespace

std::string_view ToNfc(std::string_view text, std::string* scratch) {
  bool may_change = false;
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0xCC) {
      may_change = true;
      break;
    }
  }
  if (!may_change) return text;
  scratch->clear();
  scratch->reserve(text.size());
  size_t run_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Char c = DecodeUtf8(text, pos);
    if (!c.valid) {
      AppendNfc(text.substr(run_start, pos - run_start), scratch);
      scratch->push_back(text[pos]);
      run_start = pos + 1;
    }
    pos += c.length;
  }
  AppendNfc(text.substr(run_start), scratch);
  return *scratch;
}

}  // namespace colossal::io
