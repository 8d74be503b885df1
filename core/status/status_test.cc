#include "core/status/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "core/status/suggest.h"

namespace colossal::core {
namespace {

int calls = 0;

absl::Status fails_with(absl::StatusCode code) {
  ++calls;
  return absl::Status(code, "inner");
}

absl::StatusOr<int> value_or(bool ok, int v) {
  ++calls;
  if (!ok) return absl::NotFoundError("no value");
  return v;
}

absl::Status return_if_error(absl::Status s, bool* reached_end) {
  COLOSSAL_RETURN_IF_ERROR(s);
  *reached_end = true;
  return absl::OkStatus();
}

absl::StatusOr<std::string> return_if_error_statusor(bool ok) {
  COLOSSAL_RETURN_IF_ERROR(value_or(ok, 1));  // a StatusOr works too
  return std::string("done");
}

absl::StatusOr<int> assign_twice(bool first_ok, bool second_ok) {
  COLOSSAL_ASSIGN_OR_RETURN(int a, value_or(first_ok, 20));
  int b = 0;
  COLOSSAL_ASSIGN_OR_RETURN(b, value_or(second_ok, 22));  // existing variable
  return a + b;
}

absl::StatusOr<std::unique_ptr<int>> move_only(bool ok) {
  if (!ok) return absl::InternalError("no");
  return std::make_unique<int>(7);
}

absl::StatusOr<int> assign_move_only(bool ok) {
  COLOSSAL_ASSIGN_OR_RETURN(auto p, move_only(ok));
  return *p;
}

TEST(StatusMacrosTest, ReturnIfErrorPassesErrorsUp) {
  bool reached = false;
  EXPECT_TRUE(return_if_error(absl::OkStatus(), &reached).ok());
  EXPECT_TRUE(reached);
  reached = false;
  const absl::Status s = return_if_error(absl::InvalidArgumentError("bad shape"), &reached);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad shape");
  EXPECT_FALSE(reached);

  EXPECT_EQ(*return_if_error_statusor(true), "done");
  EXPECT_EQ(return_if_error_statusor(false).status().code(), absl::StatusCode::kNotFound);
}

TEST(StatusMacrosTest, ExpressionIsEvaluatedOnce) {
  calls = 0;
  bool reached = false;
  (void)return_if_error(fails_with(absl::StatusCode::kInternal), &reached);
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_EQ(*assign_twice(true, true), 42);
  EXPECT_EQ(calls, 2);
}

TEST(StatusMacrosTest, AssignOrReturn) {
  EXPECT_EQ(*assign_twice(true, true), 42);
  EXPECT_EQ(assign_twice(false, true).status().message(), "no value");
  calls = 0;
  EXPECT_EQ(assign_twice(true, false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(*assign_move_only(true), 7);
  EXPECT_EQ(assign_move_only(false).status().code(), absl::StatusCode::kInternal);
}

TEST(StatusTest, AnnotateKeepsCodeAndPrefixesMessage) {
  const absl::Status s = annotate(absl::InvalidArgumentError("shape [2, 3]"), "layer 3");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "layer 3: shape [2, 3]");
  EXPECT_TRUE(annotate(absl::OkStatus(), "layer 3").ok());
  EXPECT_EQ(annotate(absl::InternalError("x"), "").message(), "x");
}

TEST(StatusTest, OptionErrorsCarryTheirKeyThroughAnnotate) {
  const absl::Status e = option_error("stage", "must be 1 or 2");
  EXPECT_EQ(e.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.message(), "stage must be 1 or 2");
  EXPECT_EQ(option_key(e), std::optional<std::string>("stage"));
  const absl::Status up = annotate(e, "low_level_zero");
  EXPECT_EQ(up.message(), "low_level_zero: stage must be 1 or 2");
  EXPECT_EQ(option_key(up), std::optional<std::string>("stage"));
  const absl::Status tagged = with_option_key(absl::OutOfRangeError("n_head is 0"), "n_head");
  EXPECT_EQ(tagged.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(tagged.message(), "n_head is 0");
  EXPECT_EQ(option_key(tagged), std::optional<std::string>("n_head"));
  EXPECT_TRUE(with_option_key(absl::OkStatus(), "x").ok());
  EXPECT_EQ(option_key(absl::InvalidArgumentError("stage must be 1")), std::nullopt);
}

TEST(StatusTest, FromKernelStatus) {
  using kernels::KernelStatus;
  EXPECT_TRUE(from_kernel_status(KernelStatus(), "reduce").ok());
  absl::Status s = from_kernel_status(KernelStatus::invalid_argument("null pointer"), "reduce");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "reduce: null pointer");
  s = from_kernel_status(KernelStatus::unsupported("dtype must be float32"), "softmax");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "softmax: dtype must be float32");
  s = from_kernel_status(KernelStatus::cuda_error(700, "an illegal memory access"), "adam");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "adam: CUDA error 700: an illegal memory access");
  EXPECT_EQ(from_kernel_status(KernelStatus::unsupported("no"), "").message(), "no");
}

TEST(SuggestTest, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("bfloat61", "bfloat16"), 1u);  // neighbours swapped
  EXPECT_EQ(edit_distance("BF16", "bf16"), 0u);          // case-insensitive
  EXPECT_EQ(edit_distance("fp3", "fp32"), 1u);
}

TEST(SuggestTest, ClosestMatchAndDidYouMean) {
  const std::vector<absl::string_view> names = {"float32", "float16", "bfloat16", "int32"};
  EXPECT_EQ(closest_match("bfloat61", names), "bfloat16");
  EXPECT_EQ(closest_match("flaot32", names), "float32");
  EXPECT_EQ(closest_match("float", names), "");  // two edits from five letters: too far
  EXPECT_EQ(closest_match("xyz", names), "");
  EXPECT_EQ(did_you_mean("int23", names), "; did you mean \"int32\"?");
  EXPECT_EQ(did_you_mean("complex64", names), "");
  EXPECT_EQ(closest_match("a", {}), "");
}

}  // namespace
}  // namespace colossal::core
