#include "lua/cli/flags.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colossal::lua::cli {
namespace {

constexpr FlagSpec kSpecs[] = {
    {"--nproc_per_node", FlagKind::kValue, "N", ""},
    {"--input", FlagKind::kList, "PATH...", ""},
    {"--verbose", FlagKind::kBool, "", ""},
};

TEST(Flags, ValuesListsAndBools) {
  const std::vector<std::string> args = {"--nproc_per_node", "4", "--input", "a", "b",
                                         "--verbose",        "--input=c", "pos"};
  auto f = ParseFlags(args, kSpecs, false);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->value("--nproc_per_node"), "4");
  EXPECT_EQ(f->values.at("--input"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(f->has("--verbose"));
  EXPECT_EQ(f->positional, std::vector<std::string>{"pos"});
  EXPECT_FALSE(f->help);
}

TEST(Flags, UnknownFlagSuggests) {
  const std::vector<std::string> args = {"--nproc_per_nod", "2", "check"};
  auto f = ParseFlags(args, kSpecs, true);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.status().message(),
            "unknown flag --nproc_per_nod; did you mean \"--nproc_per_node\"?");
}

TEST(Flags, StopAtPositionalKeepsTheRest) {
  const std::vector<std::string> args = {"--nproc_per_node=2", "check", "--whatever", "x"};
  auto f = ParseFlags(args, kSpecs, true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->value("--nproc_per_node"), "2");
  EXPECT_EQ(f->positional, (std::vector<std::string>{"check", "--whatever", "x"}));
}

TEST(Flags, DoubleDashEndsFlags) {
  const std::vector<std::string> args = {"--", "--verbose"};
  auto f = ParseFlags(args, kSpecs, false);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->positional, std::vector<std::string>{"--verbose"});
}

TEST(Flags, MissingValuesAndBadNumbers) {
  EXPECT_EQ(ParseFlags(std::vector<std::string>{"--nproc_per_node"}, kSpecs, false)
                .status()
                .message(),
            "--nproc_per_node needs a value (N)");
  EXPECT_EQ(ParseFlags(std::vector<std::string>{"--input", "--verbose"}, kSpecs, false)
                .status()
                .message(),
            "--input needs at least one value (PATH...)");
  EXPECT_EQ(ParseFlags(std::vector<std::string>{"--verbose=1"}, kSpecs, false).status().message(),
            "--verbose takes no value");
  auto f = ParseFlags(std::vector<std::string>{"--nproc_per_node", "two"}, kSpecs, false);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(IntFlag(*f, "--nproc_per_node", 1, 1, 8).status().message(),
            "--nproc_per_node wants an integer, got 'two'");
  auto g = ParseFlags(std::vector<std::string>{"--nproc_per_node", "9"}, kSpecs, false);
  EXPECT_EQ(IntFlag(*g, "--nproc_per_node", 1, 1, 8).status().message(),
            "--nproc_per_node must be in [1, 8], got 9");
  EXPECT_EQ(*IntFlag(*g, "--absent", 7, 1, 8), 7);
}

TEST(Flags, Help) {
  auto f = ParseFlags(std::vector<std::string>{"-h"}, kSpecs, false);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->help);
  EXPECT_NE(FlagHelp(kSpecs).find("--nproc_per_node N"), std::string::npos);
}

}  // namespace
}  // namespace colossal::lua::cli
