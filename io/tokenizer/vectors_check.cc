#include "io/tokenizer/vectors_check.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "io/common/file_util.h"
#include "nlohmann/json.hpp"

namespace colossal::io {

int ExpectTokenizerMatchesVectors(const Tokenizer& tokenizer, const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  if (!contents.ok()) {
    ADD_FAILURE() << contents.status();
    return 0;
  }
  const nlohmann::json vectors = nlohmann::json::parse(*contents);
  int failures = 0;
  auto report = [&](const std::string& name, const std::string& text, const char* what,
                    const std::vector<int32_t>& want, const std::vector<int32_t>& got) {
    if (++failures <= 20) {
      ADD_FAILURE() << path << ": case " << name << " (\"" << absl::CHexEscape(text) << "\"): " << what
                    << "\n  want [" << absl::StrJoin(want, ", ") << "]\n  got  [" << absl::StrJoin(got, ", ")
                    << "]";
    }
  };
  int checked = 0;
  for (const nlohmann::json& c : vectors.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> ordinary = c.at("ordinary").get<std::vector<int32_t>>();
    const std::vector<int32_t> allow = c.at("allow").get<std::vector<int32_t>>();
    const bool rejects = c.at("rejects").get<bool>();
    ++checked;

    const std::vector<int32_t> got = tokenizer.EncodeOrdinary(text);
    if (got != ordinary) report(name, text, "EncodeOrdinary", ordinary, got);

    absl::StatusOr<std::vector<int32_t>> allowed = tokenizer.Encode(text, SpecialTokens::kAllow);
    if (!allowed.ok()) {
      ADD_FAILURE() << name << ": " << allowed.status();
    } else if (*allowed != allow) {
      report(name, text, "Encode(kAllow)", allow, *allowed);
    }

    absl::StatusOr<std::vector<int32_t>> strict = tokenizer.Encode(text, SpecialTokens::kReject);
    if (strict.ok() == rejects) {
      ADD_FAILURE() << name << ": Encode(kReject) " << (rejects ? "accepted" : "rejected") << " \""
                    << absl::CHexEscape(text) << "\"" << (strict.ok() ? "" : ": ") << strict.status().message();
    } else if (strict.ok() && *strict != ordinary) {
      report(name, text, "Encode(kReject)", ordinary, *strict);
    }

    for (const std::vector<int32_t>* ids : {&ordinary, &allow}) {
      absl::StatusOr<std::string> decoded = tokenizer.Decode(*ids);
      if (!decoded.ok() || *decoded != text) {
        ADD_FAILURE() << name << ": Decode does not give the text back: "
                      << (decoded.ok() ? absl::CHexEscape(*decoded) : decoded.status().ToString());
      }
    }
  }
  if (failures > 20) ADD_FAILURE() << path << ": " << failures - 20 << " more mismatching cases";
  return checked;
}

}  // namespace colossal::io
