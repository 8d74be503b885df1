#include "lua/cli/flags.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status/suggest.h"

namespace colossal::lua::cli {

std::string ParsedFlags::value(absl::string_view name, std::string fallback) const {
  auto it = values.find(std::string(name));
  if (it == values.end() || it->second.empty()) return fallback;
  return it->second.back();
}

absl::StatusOr<ParsedFlags> ParseFlags(absl::Span<const std::string> args,
                                       absl::Span<const FlagSpec> specs, bool stop_at_positional) {
  ParsedFlags out;
  std::vector<absl::string_view> names;
  for (const FlagSpec& s : specs) names.push_back(s.name);
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "--help" || arg == "-h") {
      out.help = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      if (stop_at_positional) break;
      out.positional.push_back(arg);
      continue;
    }
    std::string name = arg;
    std::string inline_value;
    const size_t eq = arg.find('=');
    const bool has_inline = eq != std::string::npos;
    if (has_inline) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", name, core::did_you_mean(name, names)));
    }
    std::vector<std::string>& slot = out.values[name];
    if (spec->kind == FlagKind::kBool) {
      if (has_inline) return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
      slot.push_back("true");
      continue;
    }
    if (has_inline) {
      slot.push_back(inline_value);
      continue;
    }
    if (spec->kind == FlagKind::kValue) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " needs a value (", spec->value_name, ")"));
      }
      slot.push_back(args[++i]);
      continue;
    }
    // kList: everything up to the next flag.
    size_t taken = 0;
    while (i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0) {
      slot.push_back(args[++i]);
      ++taken;
    }
    if (taken == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " needs at least one value (", spec->value_name, ")"));
    }
  }
  for (; i < args.size(); ++i) out.positional.push_back(args[i]);
  return out;
}

absl::StatusOr<int> IntFlag(const ParsedFlags& flags, absl::string_view name, int fallback, int min,
                            int max) {
  if (!flags.has(name)) return fallback;
  const std::string text = flags.value(name);
  int v = 0;
  if (!absl::SimpleAtoi(text, &v)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " wants an integer, got '", text, "'"));
  }
  if (v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be in [", min, ", ", max, "], got ", v));
  }
  return v;
}

absl::StatusOr<double> DoubleFlag(const ParsedFlags& flags, absl::string_view name,
                                  double fallback) {
  if (!flags.has(name)) return fallback;
  const std::string text = flags.value(name);
  double v = 0;
  if (!absl::SimpleAtod(text, &v)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " wants a number, got '", text, "'"));
  }
  return v;
}

std::string FlagHelp(absl::Span<const FlagSpec> specs) {
  std::string out = "options:\n";
  for (const FlagSpec& s : specs) {
    std::string left = absl::StrCat("  ", s.name);
    if (!s.value_name.empty()) absl::StrAppend(&left, " ", s.value_name);
    if (left.size() < 28) left.resize(28, ' ');
    absl::StrAppend(&out, left, " ", s.help, "\n");
  }
  absl::StrAppend(&out, "  --help, -h                   this help\n");
  return out;
}

}  // namespace colossal::lua::cli
