#include "io/prepare/documents.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "io/prepare/test_util.h"

namespace colossal::io {
namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

std::vector<std::string> Paragraphs(std::string_view text) {
  std::vector<std::string> out;
  for (const auto& [b, e] : ParagraphRanges(text)) out.emplace_back(text.substr(b, e - b));
  return out;
}

TEST(DocumentsTest, ParagraphsAreSeparatedByBlankLines) {
  using P = std::vector<std::string>;
  EXPECT_EQ(Paragraphs("First line\nsecond line\n\nNext one.\n"), (P{"First line\nsecond line", "Next one.\n"}));
  EXPECT_EQ(Paragraphs("a\n\n\n\nb"), (P{"a", "b"}));  // a longer run is one separator
  EXPECT_EQ(Paragraphs("\n\n\na\n"), (P{"a\n"}));       // leading blank lines dropped
  EXPECT_EQ(Paragraphs("a\n\n"), (P{"a"}));
  EXPECT_EQ(Paragraphs("a\r\n\r\nb"), (P{"a\r\n\r\nb"}));  // CRLF blank lines are not separators
  EXPECT_EQ(Paragraphs(" \n\n "), (P{" ", " "}));
  EXPECT_TRUE(Paragraphs("").empty());
  EXPECT_TRUE(Paragraphs("\n\n\n").empty());
  EXPECT_EQ(Paragraphs("\n"), (P{"\n"}));
}

// kLine: each non-empty line, without its "\r\n" or "\n", numbered as an
// editor numbers it (empty lines count), so errors can name file:line.
TEST(DocumentsTest, SplitsLinesKeepingTheirNumbers) {
  const std::string dir = testing::MakeTestDir();
  const std::string text = "{\"a\": 1}\r\n\n\nsecond\nthird\r\n\r\nlast";
  testing::WriteFile(dir + "/c.jsonl", text);
  const std::vector<InputFile> files = {{dir + "/c.jsonl", "c.jsonl", text.size()}};
  absl::StatusOr<std::vector<Document>> docs = SplitDocuments(files, DocumentSplit::kLine);
  ASSERT_TRUE(docs.ok()) << docs.status();
  std::vector<std::pair<std::string, uint64_t>> got;
  for (const Document& d : *docs) got.emplace_back(text.substr(d.begin, d.bytes()), d.line);
  EXPECT_EQ(got, (std::vector<std::pair<std::string, uint64_t>>{
                     {"{\"a\": 1}", 1}, {"second", 4}, {"third", 5}, {"last", 7}}));
  EXPECT_EQ((*docs)[1].hash, DocumentHash("c.jsonl", 4));
  EXPECT_EQ(DocumentSplitFromName("line"), DocumentSplit::kLine);
  EXPECT_STREQ(DocumentSplitName(DocumentSplit::kLine), "line");
}

TEST(DocumentsTest, SplitsFilesOrParagraphs) {
  const std::string dir = testing::MakeTestDir();
  testing::WriteFile(dir + "/a.txt", "one\n\ntwo\n\n\nthree");
  testing::WriteFile(dir + "/empty.txt", "");
  testing::WriteFile(dir + "/b.txt", "solo");
  const std::vector<InputFile> files = {{dir + "/a.txt", "a.txt", 16}, {dir + "/empty.txt", "empty.txt", 0},
                                        {dir + "/b.txt", "b.txt", 4}};
  absl::StatusOr<std::vector<Document>> by_file = SplitDocuments(files, DocumentSplit::kFile);
  ASSERT_TRUE(by_file.ok()) << by_file.status();
  ASSERT_EQ(by_file->size(), 2u);  // the empty file has no document
  EXPECT_EQ((*by_file)[0].file, 0u);
  EXPECT_EQ((*by_file)[0].bytes(), 16u);
  EXPECT_EQ((*by_file)[1].file, 2u);
  EXPECT_EQ((*by_file)[1].hash, DocumentHash("b.txt", 0));

  absl::StatusOr<std::vector<Document>> by_paragraph = SplitDocuments(files, DocumentSplit::kParagraph);
  ASSERT_TRUE(by_paragraph.ok()) << by_paragraph.status();
  ASSERT_EQ(by_paragraph->size(), 4u);
  EXPECT_EQ((*by_paragraph)[0].begin, 0u);
  EXPECT_EQ((*by_paragraph)[0].end, 3u);
  EXPECT_EQ((*by_paragraph)[1].begin, 5u);
  EXPECT_EQ((*by_paragraph)[2].begin, 11u);
  EXPECT_EQ((*by_paragraph)[2].end, 16u);
  EXPECT_EQ((*by_paragraph)[2].hash, DocumentHash("a.txt", 2));

  const std::vector<InputFile> missing = {{dir + "/gone.txt", "gone.txt", 5}};
  absl::StatusOr<std::vector<Document>> error = SplitDocuments(missing, DocumentSplit::kParagraph);
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.status().message(), "cannot read input '" + dir + "/gone.txt': No such file or directory");
}

TEST(DocumentsTest, HashIsStable) {
  // Pinned: a change would move documents between train and val.
  EXPECT_EQ(DocumentHash("hamlet_gut.txt", 0), DocumentHash("hamlet_gut.txt", 0));
  EXPECT_NE(DocumentHash("hamlet_gut.txt", 0), DocumentHash("hamlet_gut.txt", 1));
  EXPECT_NE(DocumentHash("a.txt", 0), DocumentHash("b.txt", 0));
  EXPECT_EQ(DocumentHash("", 0), 0xe9d327596b869820ULL) << std::hex << DocumentHash("", 0);
}

std::vector<Document> Docs(const std::vector<uint64_t>& sizes) {
  std::vector<Document> docs;
  for (size_t i = 0; i < sizes.size(); ++i) docs.push_back({0, 0, sizes[i], DocumentHash("doc", i), false});
  return docs;
}

uint64_t ValBytes(const std::vector<Document>& docs) {
  uint64_t bytes = 0;
  for (const Document& d : docs) bytes += d.val ? d.bytes() : 0;
  return bytes;
}

TEST(DocumentsTest, ValidationTakesItsShareOfBytes) {
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 500; ++i) sizes.push_back(100 + (i * 37) % 200);  // 100..299 bytes
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  for (double fraction : {0.01, 0.05, 0.1, 0.3, 0.5}) {
    std::vector<Document> docs = Docs(sizes);
    const size_t val = AssignValidation(fraction, &docs);
    const double share = static_cast<double>(ValBytes(docs)) / static_cast<double>(total);
    EXPECT_NEAR(share, fraction, 150.0 / static_cast<double>(total)) << fraction;  // within half the largest doc
    EXPECT_GT(val, 0u);
    // Deterministic, and independent of the documents' order.
    std::vector<Document> reversed(docs.rbegin(), docs.rend());
    AssignValidation(fraction, &reversed);
    for (size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(reversed[docs.size() - 1 - i].val, docs[i].val);
  }
}

TEST(DocumentsTest, ValidationEdgeCases) {
  std::vector<Document> docs = Docs({100, 100, 100});
  EXPECT_EQ(AssignValidation(0.0, &docs), 0u);
  EXPECT_EQ(ValBytes(docs), 0u);
  // Documents far larger than the budget: still one val document.
  docs = Docs({1000, 1000, 1000});
  EXPECT_EQ(AssignValidation(0.01, &docs), 1u);
  // A large fraction still leaves train a document.
  docs = Docs({10, 10});
  EXPECT_EQ(AssignValidation(0.99, &docs), 1u);
  // One document cannot be split.
  docs = Docs({10});
  EXPECT_EQ(AssignValidation(0.5, &docs), 0u);
}

}  // namespace
}  // namespace colossal::io
