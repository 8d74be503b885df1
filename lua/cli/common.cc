#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status/suggest.h"
#include "lua/cli/commands.h"

namespace colossal::lua::cli {
namespace {

const std::vector<absl::string_view>& CommandNames() {
  static const std::vector<absl::string_view> names = {"check", "data", "run", "generate", "bench"};
  return names;
}

}  // namespace

int Fail(absl::string_view command, absl::string_view message, int code, absl::string_view usage) {
  std::string line = absl::StrCat(command.empty() ? "colossal" : absl::StrCat("colossal ", command),
                                  ": ", message, "\n");
  if (!usage.empty()) absl::StrAppend(&line, "\n", usage);
  std::fputs(line.c_str(), stderr);
  return code;
}

int FailStatus(absl::string_view command, const absl::Status& status, absl::string_view usage) {
  const bool usage_error = status.code() == absl::StatusCode::kInvalidArgument;
  return Fail(command, status.message(), usage_error ? kExitUsage : kExitFailure,
              usage_error ? usage : "");
}

bool IsCommandOrRecipe(absl::string_view arg) {
  if (absl::EndsWith(arg, ".lua")) return true;
  for (absl::string_view name : CommandNames()) {
    if (name == arg) return true;
  }
  return false;
}

std::string SuggestCommand(absl::string_view arg) {
  return core::did_you_mean(arg, CommandNames());
}

}  // namespace colossal::lua::cli
