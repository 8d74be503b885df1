// colossal::lua::cli — command-line flags of the `colossal` subcommands.
//
// Each subcommand lists its flags in one table; ParseFlags reads argv against
// it. Flags are spelt `--name value` or `--name=value`; a kList flag takes
// every following argument up to the next `--flag` (and may repeat); a kBool
// flag takes no value. Unknown flags are an InvalidArgumentError with a
// "did you mean" suggestion — the CLI turns those into exit code 2.
//
//   const FlagSpec kFlags[] = {{"--output", FlagKind::kValue, "DIR", "where shards go"}};
//   COLOSSAL_ASSIGN_OR_RETURN(ParsedFlags f, ParseFlags(args, kFlags, /*stop_at_positional=*/false));
//   std::string out = f.value("--output");
#ifndef COLOSSAL_LUA_CLI_FLAGS_H_
#define COLOSSAL_LUA_CLI_FLAGS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace colossal::lua::cli {

enum class FlagKind { kBool, kValue, kList };

struct FlagSpec {
  absl::string_view name;  // with the dashes: "--nproc_per_node"
  FlagKind kind;
  absl::string_view value_name;  // "N", "DIR" (empty for kBool)
  absl::string_view help;
};

struct ParsedFlags {
  // Flag name -> its values in order (kBool: one "true" per use).
  std::map<std::string, std::vector<std::string>> values;
  // Arguments that are not flags; with stop_at_positional, the first of them
  // and everything after it, untouched.
  std::vector<std::string> positional;
  bool help = false;  // --help or -h was given

  bool has(absl::string_view name) const { return values.count(std::string(name)) > 0; }
  // The last value given for `name`, or `fallback`.
  std::string value(absl::string_view name, std::string fallback = "") const;
};

// Parses `args` (without the program and subcommand names). With
// stop_at_positional, parsing ends at the first non-flag argument or after
// "--" (what `colossal run` needs); otherwise non-flag arguments are collected
// and "--" makes the rest positional.
absl::StatusOr<ParsedFlags> ParseFlags(absl::Span<const std::string> args,
                                       absl::Span<const FlagSpec> specs, bool stop_at_positional);

// Integer and number values, with errors naming the flag.
absl::StatusOr<int> IntFlag(const ParsedFlags& flags, absl::string_view name, int fallback, int min,
                            int max);
absl::StatusOr<double> DoubleFlag(const ParsedFlags& flags, absl::string_view name,
                                  double fallback);

// The "options:" part of a help text, one line per flag.
std::string FlagHelp(absl::Span<const FlagSpec> specs);

}  // namespace colossal::lua::cli

#endif  // COLOSSAL_LUA_CLI_FLAGS_H_
