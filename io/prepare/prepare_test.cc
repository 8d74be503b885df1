#include "io/prepare/prepare.h"

#include <sys/stat.h>

#include <cstdio>
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/common/absl_view.h"
#include "io/common/sha256.h"
#include "io/prepare/test_util.h"
#include "io/shards/loss_mask.h"
#include "io/shards/token_shard.h"
#include "io/tokenizer/load_tokenizer.h"
#include "io/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

using testing::ListDir;
using testing::MakeTestDir;
using testing::MakeText;
using testing::ReadAll;
using testing::WriteFile;

constexpr char kTinyTiktoken[] = "io/tokenizer/testdata/tiny.tiktoken";

// A corpus of `files` text files in nested folders, plus a file that is not *.txt.
std::string MakeCorpus(const std::string& dir, int files, int paragraphs = 3) {
  for (int i = 0; i < files; ++i) {
    WriteFile(absl::StrCat(dir, "/corpus/", i % 3 == 0 ? "" : "part/", "doc", i, ".txt"), MakeText(i, paragraphs));
  }
  WriteFile(dir + "/corpus/README.md", "not a .txt file: ignored");
  return dir + "/corpus";
}

PrepareOptions Options(const std::string& input, const std::string& out) {
  PrepareOptions options;
  options.inputs = {input};
  options.output_dir = out;
  options.tokenizer_path = kTinyTiktoken;
  options.name = "tiny";
  return options;
}

// Every file of `dir`, by name.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const std::string& name : ListDir(dir)) files[name] = ReadAll(dir + "/" + name);
  return files;
}

// The tokens of a split's shards, concatenated.
std::vector<uint16_t> SplitTokens(const std::string& dir, const PrepareResult& result, const std::string& split) {
  std::vector<uint16_t> tokens;
  for (const PreparedShard& s : result.shards) {
    if (s.split != split) continue;
    absl::StatusOr<TokenShard> shard = TokenShard::Open(dir + "/" + s.file);
    EXPECT_TRUE(shard.ok()) << shard.status();
    if (!shard.ok()) continue;
    EXPECT_EQ(shard->num_tokens(), s.tokens);
    tokens.insert(tokens.end(), shard->tokens16().begin(), shard->tokens16().end());
  }
  return tokens;
}

std::string Decode(const std::vector<uint16_t>& tokens) {
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromTiktokenFile(kTinyTiktoken);
  EXPECT_TRUE(tok.ok()) << tok.status();
  absl::StatusOr<std::string> text = tok->Decode(tokens);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

// The usage example of prepare.h, on a small corpus with the tiny vocabulary.
TEST(PrepareDatasetTest, WritesShardsAndManifest) {
  const std::string dir = MakeTestDir();
  const std::string corpus = MakeCorpus(dir, 40);
  const std::string out = dir + "/out/nested";  // created with its parents
  std::vector<PrepareProgress> calls;
  const std::thread::id caller = std::this_thread::get_id();
  PrepareOptions options = Options(corpus, out);
  options.val_fraction = 0.1;
  options.batch_bytes = 256;
  options.progress = [&](const PrepareProgress& p) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    calls.push_back(p);
  };
  absl::StatusOr<PrepareResult> result = PrepareDataset(options);
  ASSERT_TRUE(result.ok()) << result.status();

  EXPECT_EQ(ListDir(out), (std::vector<std::string>{"manifest.json", "tiny_train_000000.bin", "tiny_val_000000.bin"}));
  EXPECT_EQ(result->manifest_path, out + "/manifest.json");
  EXPECT_EQ(result->train_documents + result->val_documents, 40);
  EXPECT_GT(result->val_documents, 0);

  // Each split decodes to "<|endoftext|>" + document, for its documents in order.
  std::string train_text, val_text;
  const nlohmann::json manifest = nlohmann::json::parse(ReadAll(result->manifest_path));
  ASSERT_EQ(manifest["files"].size(), 40u);
  for (const auto& file : manifest["files"]) {
    const std::string text = ReadAll(file["path"].get<std::string>());
    (file["val_documents"].get<int>() == 1 ? val_text : train_text) += absl::StrCat("<|endoftext|>", text);
  }
  EXPECT_EQ(Decode(SplitTokens(out, *result, "train")), train_text);
  EXPECT_EQ(Decode(SplitTokens(out, *result, "val")), val_text);
  EXPECT_EQ(static_cast<int64_t>(SplitTokens(out, *result, "val").size()), result->val_tokens);

  // The manifest.
  EXPECT_EQ(manifest["format"], "colossal.prepare/1");
  EXPECT_EQ(manifest["name"], "tiny");
  EXPECT_EQ(manifest["tokenizer"]["path"], kTinyTiktoken);
  EXPECT_EQ(manifest["tokenizer"]["sha256"], Sha256Hex(ReadAll(kTinyTiktoken)));
  EXPECT_EQ(manifest["tokenizer"]["eot_token"], 50256);
  // What a recipe reads back of it.
  EXPECT_EQ(ManifestVocabSize(result->manifest_path), manifest["tokenizer"]["vocab_size"].get<int64_t>());
  EXPECT_EQ(ManifestVocabSize(result->manifest_path + ".missing"), std::nullopt);
  EXPECT_EQ(manifest["options"]["split"], "file");
  EXPECT_EQ(manifest["options"]["shard_tokens"], 10000000);
  EXPECT_EQ(manifest["inputs"], nlohmann::json::array({corpus}));
  EXPECT_EQ(manifest["tokens"]["train"], result->train_tokens);
  EXPECT_EQ(manifest["tokens"]["val"], result->val_tokens);
  EXPECT_EQ(manifest["documents"]["val"], result->val_documents);
  ASSERT_EQ(manifest["shards"].size(), 2u);
  EXPECT_EQ(manifest["shards"][0]["file"], "tiny_val_000000.bin");
  EXPECT_EQ(manifest["shards"][0]["split"], "val");
  EXPECT_EQ(manifest["shards"][1]["file"], "tiny_train_000000.bin");

  // Progress: zeros first, then growing, ending at the totals.
  ASSERT_GE(calls.size(), 3u);
  EXPECT_EQ(calls.front().bytes_done, 0u);
  EXPECT_EQ(calls.front().documents_total, 40);
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GE(calls[i].bytes_done, calls[i - 1].bytes_done);
  EXPECT_EQ(calls.back().bytes_done, calls.back().bytes_total);
  EXPECT_EQ(calls.back().bytes_total, result->train_bytes + result->val_bytes);
  EXPECT_EQ(calls.back().documents_done, 40);
  EXPECT_EQ(calls.back().tokens_done, result->train_tokens + result->val_tokens);
}

TEST(PrepareDatasetTest, SameBytesForAnyThreadCountAndOnReruns) {
  const std::string dir = MakeTestDir();
  const std::string corpus = MakeCorpus(dir, 60);
  std::map<std::string, std::string> first;
  for (int threads : {1, 2, 4, 4}) {
    const std::string out = dir + "/out";  // the same folder every time: re-runs replace the files
    PrepareOptions options = Options(corpus, out);
    options.threads = threads;
    options.batch_bytes = 100;  // many batches, so threads interleave
    options.shard_tokens = 500;
    options.split = DocumentSplit::kParagraph;
    absl::StatusOr<PrepareResult> result = PrepareDataset(options);
    ASSERT_TRUE(result.ok()) << result.status();
    std::map<std::string, std::string> files = Files(out);
    if (first.empty()) {
      first = files;
      EXPECT_GT(files.size(), 4u);
    } else {
      EXPECT_EQ(files, first) << threads << " threads";
    }
  }
}

TEST(PrepareDatasetTest, ShardsSplitAtTheTokenLimit) {
  const std::string dir = MakeTestDir();
  const std::string corpus = MakeCorpus(dir, 30);
  PrepareOptions options = Options(corpus, dir + "/big");
  absl::StatusOr<PrepareResult> big = PrepareDataset(options);
  ASSERT_TRUE(big.ok()) << big.status();

  options.output_dir = dir + "/small";
  options.shard_tokens = 97;
  absl::StatusOr<PrepareResult> small = PrepareDataset(options);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->train_tokens, big->train_tokens);
  for (const std::string split : {"train", "val"}) {
    std::vector<const PreparedShard*> shards;
    for (const PreparedShard& s : small->shards) {
      if (s.split == split) shards.push_back(&s);
    }
    ASSERT_FALSE(shards.empty());
    for (size_t i = 0; i < shards.size(); ++i) {
      char expected[64];
      std::snprintf(expected, sizeof(expected), "tiny_%s_%06zu.bin", split.c_str(), i);
      EXPECT_EQ(shards[i]->file, expected);
      if (i + 1 < shards.size()) {
        EXPECT_EQ(shards[i]->tokens, 97) << shards[i]->file;
      } else {
        EXPECT_GT(shards[i]->tokens, 0);
        EXPECT_LE(shards[i]->tokens, 97);
      }
    }
    // The same token stream, cut differently.
    EXPECT_EQ(SplitTokens(dir + "/small", *small, split), SplitTokens(dir + "/big", *big, split));
  }

  // Re-running with bigger shards into the same folder removes the extra ones.
  WriteFile(dir + "/small/keep_me.bin", "not a shard of this dataset");
  options.shard_tokens = 10'000'000;
  absl::StatusOr<PrepareResult> again = PrepareDataset(options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ListDir(dir + "/small"), (std::vector<std::string>{"keep_me.bin", "manifest.json",
                                                               "tiny_train_000000.bin", "tiny_val_000000.bin"}));
  EXPECT_EQ(Files(dir + "/small")["tiny_train_000000.bin"], Files(dir + "/big")["tiny_train_000000.bin"]);
}

TEST(PrepareDatasetTest, ValFractionIsRespected) {
  const std::string dir = MakeTestDir();
  WriteFile(dir + "/book.txt", MakeText(7, 400));  // one file, 400 paragraphs
  for (double fraction : {0.0, 0.05, 0.2}) {
    PrepareOptions options = Options(dir + "/book.txt", absl::StrCat(dir, "/out", fraction));
    options.split = DocumentSplit::kParagraph;
    options.val_fraction = fraction;
    absl::StatusOr<PrepareResult> result = PrepareDataset(options);
    ASSERT_TRUE(result.ok()) << result.status();
    const double bytes = static_cast<double>(result->train_bytes + result->val_bytes);
    EXPECT_NEAR(static_cast<double>(result->val_bytes) / bytes, fraction, 0.01) << fraction;
    EXPECT_EQ(result->train_documents + result->val_documents, 400);
    if (fraction == 0) {
      EXPECT_EQ(result->val_tokens, 0);
      EXPECT_EQ(ListDir(options.output_dir),
                (std::vector<std::string>{"manifest.json", "tiny_train_000000.bin"}));  // no val shard
    }
  }
}

TEST(PrepareDatasetTest, OneDocumentCannotBeSplit) {
  const std::string dir = MakeTestDir();
  WriteFile(dir + "/book.txt", MakeText(1, 10));
  absl::StatusOr<PrepareResult> result = PrepareDataset(Options(dir + "/book.txt", dir + "/out"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(),
            absl::StrCat("prepare: val_fraction 0.05 needs at least two documents, but the inputs are one document ('",
                         dir, "/book.txt'): split it into paragraphs (recipe data.split = \"paragraph\", data prepare --split paragraph), or set val_fraction 0"));
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"book.txt"});  // nothing written
}

TEST(PrepareDatasetTest, ErrorsNameThePath) {
  const std::string dir = MakeTestDir();
  const std::string corpus = MakeCorpus(dir, 3);
  WriteFile(dir + "/empty/a.txt", "");
  WriteFile(dir + "/not_a_folder", "x");
  struct Case {
    std::function<void(PrepareOptions*)> change;
    absl::StatusCode code;
    std::string message;  // a part of it
  };
  const std::vector<Case> cases = {
      {[](PrepareOptions* o) { o->inputs.clear(); }, absl::StatusCode::kInvalidArgument, "no inputs given"},
      {[&](PrepareOptions* o) { o->inputs = {dir + "/nope/*.txt"}; }, absl::StatusCode::kInvalidArgument,
       "input pattern '" + dir + "/nope/*.txt' matches no files"},
      {[&](PrepareOptions* o) { o->inputs = {dir + "/missing.txt"}; }, absl::StatusCode::kNotFound,
       "cannot read input '" + dir + "/missing.txt'"},
      {[&](PrepareOptions* o) { o->inputs = {dir + "/empty"}; }, absl::StatusCode::kInvalidArgument,
       "prepare: the inputs (1 file) hold no text"},
      {[&](PrepareOptions* o) { o->output_dir = dir + "/not_a_folder/out"; }, absl::StatusCode::kFailedPrecondition,
       "cannot create output folder '" + dir + "/not_a_folder/out': Not a directory"},
      {[&](PrepareOptions* o) { o->output_dir = dir + "/not_a_folder"; }, absl::StatusCode::kFailedPrecondition,
       "cannot create output folder '" + dir + "/not_a_folder': Not a directory"},
      {[&](PrepareOptions* o) { o->tokenizer_path = dir + "/gpt2.tiktoken"; }, absl::StatusCode::kNotFound,
       dir + "/gpt2.tiktoken"},
      {[](PrepareOptions* o) { o->val_fraction = 1; }, absl::StatusCode::kInvalidArgument,
       "prepare: val_fraction 1 must be in [0, 1)"},
      {[](PrepareOptions* o) { o->shard_tokens = 0; }, absl::StatusCode::kInvalidArgument,
       "prepare: shard_tokens 0 must be in [1, 2147483647]"},
      {[](PrepareOptions* o) { o->name = "a/b"; }, absl::StatusCode::kInvalidArgument, "name 'a/b'"},
  };
  for (const Case& c : cases) {
    PrepareOptions options = Options(corpus, dir + "/out");
    c.change(&options);
    absl::StatusOr<PrepareResult> result = PrepareDataset(options);
    ASSERT_FALSE(result.ok()) << c.message;
    EXPECT_EQ(result.status().code(), c.code) << result.status();
    EXPECT_TRUE(absl::StrContains(result.status().message(), ToAbsl(c.message)))
        << result.status() << "\n  expected to contain: " << c.message;
  }
}

// The tiny Llama 3-style tokenizer.json with its special tokens moved to
// Llama 3's own ids (128000 = <|begin_of_text|> ...): 128010 ids, so shards
// need 32-bit tokens.
std::string MakeLlama3Folder(const std::string& dir) {
  nlohmann::json j = nlohmann::json::parse(ReadAll("io/tokenizer/testdata/llama3_tiny/tokenizer.json"));
  constexpr int kShift = 128000 - 600;
  for (auto& t : j["added_tokens"]) t["id"] = t["id"].get<int>() + kShift;
  for (auto& p : j["post_processor"]["processors"]) {
    if (p["type"] != "TemplateProcessing") continue;
    for (auto& [name, special] : p["special_tokens"].items()) {
      for (auto& id : special["ids"]) id = id.get<int>() + kShift;
    }
  }
  const std::string folder = dir + "/Llama-3-tiny";
  WriteFile(folder + "/tokenizer.json", j.dump());
  WriteFile(folder + "/tokenizer_config.json", ReadAll("io/tokenizer/testdata/llama3_tiny/tokenizer_config.json"));
  return folder;
}

// A model folder as --tokenizer: Llama 3's <|begin_of_text|> starts each
// document, and the ids (above 65535) go into llm.c's uint32 shards.
TEST(PrepareDatasetTest, Llama3FolderWritesUint32ShardsWithBos) {
  const std::string dir = MakeTestDir();
  const std::string corpus = MakeCorpus(dir, 12);
  const std::string out = dir + "/out";
  PrepareOptions options = Options(corpus, out);
  options.tokenizer_path = MakeLlama3Folder(dir);
  options.val_fraction = 0.2;
  absl::StatusOr<PrepareResult> result = PrepareDataset(options);
  ASSERT_TRUE(result.ok()) << result.status();
  absl::StatusOr<std::unique_ptr<TextTokenizer>> tok = LoadTokenizer(options.tokenizer_path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 128010);

  const nlohmann::json manifest = nlohmann::json::parse(ReadAll(result->manifest_path));
  EXPECT_EQ(manifest["tokenizer"]["kind"], "tokenizer.json");
  EXPECT_EQ(manifest["tokenizer"]["file"], "tokenizer.json");
  EXPECT_EQ(manifest["tokenizer"]["sha256"], Sha256Hex(ReadAll(options.tokenizer_path + "/tokenizer.json")));
  EXPECT_EQ(manifest["tokenizer"]["eot_token"], 128000);
  EXPECT_EQ(manifest["tokenizer"]["token_dtype"], "uint32");
  EXPECT_EQ(manifest["tokenizer"]["vocab_size"], 128010);

  std::string expected[2];  // train, val
  for (const auto& file : manifest["files"]) {
    expected[file["val_documents"].get<int>()] +=
        absl::StrCat("<|begin_of_text|>", ReadAll(file["path"].get<std::string>()));
  }
  for (const char* split : {"train", "val"}) {
    std::vector<int32_t> ids;
    for (const PreparedShard& s : result->shards) {
      if (s.split != split) continue;
      absl::StatusOr<TokenShard> shard = TokenShard::Open(out + "/" + s.file);
      ASSERT_TRUE(shard.ok()) << shard.status();
      EXPECT_EQ(shard->width(), TokenWidth::kUint32);
      const size_t at = ids.size();
      ids.resize(at + shard->num_tokens());
      shard->CopyTokens(0, shard->num_tokens(), ids.data() + at);
    }
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), 128000);
    absl::StatusOr<std::string> text = (*tok)->Decode(ids);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, expected[std::string(split) == "val"]) << split;
  }
}

// Llama 2's tokenizer.model: <s> starts each document; 700 ids fit uint16.
TEST(PrepareDatasetTest, SentencePieceModelStartsDocumentsWithBos) {
  const std::string dir = MakeTestDir();
  PrepareOptions options = Options(MakeCorpus(dir, 6), dir + "/out");
  options.tokenizer_path = "io/tokenizer/testdata/spm_tiny/tokenizer.model";
  options.val_fraction = 0;
  absl::StatusOr<PrepareResult> result = PrepareDataset(options);
  ASSERT_TRUE(result.ok()) << result.status();
  const nlohmann::json manifest = nlohmann::json::parse(ReadAll(result->manifest_path));
  EXPECT_EQ(manifest["tokenizer"]["kind"], "sentencepiece");
  EXPECT_EQ(manifest["tokenizer"]["token_dtype"], "uint16");
  EXPECT_EQ(manifest["tokenizer"]["eot_token"], 1);
  const std::vector<uint16_t> ids = SplitTokens(dir + "/out", *result, "train");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 6);  // one <s> per document
  EXPECT_EQ(ids.front(), 1);
}

}  // namespace
}  // namespace colossal::io

namespace colossal::io {
namespace {

// Chat data with the Qwen2 fixture tokenizer and ChatML, all of it train.
PrepareOptions ChatOptions(const std::string& input, const std::string& out) {
  PrepareOptions o = Options(input, out);
  o.tokenizer_path = "io/tokenizer/testdata/qwen2_tiny";
  o.format = DataFormat::kChat;
  o.split = DocumentSplit::kLine;
  o.chat_template = ChatTemplate::kChatMl;
  o.val_fraction = 0;
  return o;
}

// Chat data: every conversation rendered by its template, in line order over
// shards of 64 tokens, each with a loss mask equal to the renderer's; the
// manifest says so; a text prepare into the same folder removes the masks.
TEST(PrepareDatasetTest, ChatLinesBecomeShardsWithLossMasks) {
  const std::string dir = MakeTestDir();
  std::vector<std::string> lines;
  for (int i = 0; i < 12; ++i) {
    lines.push_back(nlohmann::json{{"messages",
                                    {{{"role", "user"}, {"content", absl::StrCat("question ", i, "?")}},
                                     {{"role", "assistant"}, {"content", absl::StrCat("answer number ", i * 7)}}}}}
                        .dump());
  }
  std::string jsonl;
  for (size_t i = 0; i < lines.size(); ++i) jsonl += lines[i] + (i == 4 ? "\r\n\n" : "\n");  // CRLF, a blank line
  WriteFile(dir + "/chats/a.jsonl", jsonl);
  WriteFile(dir + "/chats/notes.txt", "not *.jsonl: ignored");
  PrepareOptions o = ChatOptions(dir + "/chats", dir + "/out");
  o.shard_tokens = 64;
  absl::StatusOr<PrepareResult> r = PrepareDataset(o);
  ASSERT_TRUE(r.ok()) << r.status();

  absl::StatusOr<std::unique_ptr<TextTokenizer>> tok = LoadTokenizer(o.tokenizer_path);
  ASSERT_TRUE(tok.ok());
  absl::StatusOr<ChatRenderer> chat = ChatRenderer::Create(**tok, ChatTemplate::kChatMl);
  ASSERT_TRUE(chat.ok());
  std::vector<int32_t> want_ids;
  std::vector<uint8_t> want_counted;
  for (const std::string& line : lines) {
    const size_t first = want_counted.size();
    chat->Render(ParseConversation(line).value(), &want_ids, &want_counted);
    want_counted[first] |= kDocumentStart;  // each conversation's first token
  }

  std::vector<int32_t> ids;
  std::vector<uint8_t> counted;
  int64_t manifest_counted = 0;
  ASSERT_GT(r->shards.size(), 2u);
  for (const PreparedShard& s : r->shards) {
    EXPECT_EQ(s.split, "train");
    EXPECT_EQ(s.mask_file, absl::StrCat(s.file.substr(0, s.file.size() - 4), ".mask"));
    absl::StatusOr<TokenShard> shard = TokenShard::Open(dir + "/out/" + s.file);
    absl::StatusOr<LossMask> mask = LossMask::Open(dir + "/out/" + s.mask_file);
    ASSERT_TRUE(shard.ok()) << shard.status();
    ASSERT_TRUE(mask.ok()) << mask.status();
    ASSERT_EQ(shard->num_tokens(), mask->num_tokens());
    for (int64_t i = 0; i < shard->num_tokens(); ++i) ids.push_back(shard->token(i));
    counted.insert(counted.end(), mask->values().begin(), mask->values().end());
    manifest_counted += s.counted;
  }
  EXPECT_EQ(ids, want_ids);
  EXPECT_EQ(counted, want_counted);
  const int64_t total_counted =
      std::count_if(want_counted.begin(), want_counted.end(), [](uint8_t f) { return (f & kCounted) != 0; });
  EXPECT_EQ(r->train_counted_tokens, total_counted);
  EXPECT_EQ(manifest_counted, total_counted);
  EXPECT_EQ(r->train_documents, 12);
  const nlohmann::json m = nlohmann::json::parse(ReadAll(r->manifest_path));
  EXPECT_EQ(m["options"]["format"], "chat");
  EXPECT_EQ(m["options"]["split"], "line");
  EXPECT_EQ(m["options"]["chat_template"], "chatml");
  EXPECT_EQ(m["counted_tokens"]["train"], total_counted);
  EXPECT_EQ(m["shards"][0]["mask"], r->shards[0].mask_file);

  // Text into the same folder and name: the old shards and masks go.
  WriteFile(dir + "/text/a.txt", MakeText(1, 2));
  PrepareOptions text = Options(dir + "/text", dir + "/out");
  text.val_fraction = 0;
  ASSERT_TRUE(PrepareDataset(text).ok());
  for (const std::string& name : ListDir(dir + "/out")) EXPECT_FALSE(absl::EndsWith(name, ".mask")) << name;
}

TEST(PrepareDatasetTest, ChatErrorsNameTheLineAndTheKey) {
  const std::string dir = MakeTestDir();
  WriteFile(dir + "/c.jsonl",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}\n"
            "\n"
            "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"robot\", \"content\": \"a\"}]}\n");
  PrepareOptions o = ChatOptions(dir + "/c.jsonl", dir + "/out");
  absl::StatusOr<PrepareResult> r = PrepareDataset(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "/c.jsonl:3: messages[1].role: unknown role \"robot\""))
      << r.status();
  struct stat st;
  EXPECT_NE(::stat((dir + "/out/manifest.json").c_str(), &st), 0);

  o.split = DocumentSplit::kParagraph;
  EXPECT_TRUE(absl::StrContains(PrepareDataset(o).status().message(), "split must be \"line\""));
  o.split = DocumentSplit::kLine;
  o.chat_template = std::nullopt;  // the fixture folder names no template
  EXPECT_TRUE(absl::StrContains(PrepareDataset(o).status().message(), "has no chat template"));
  o.chat_template = ChatTemplate::kLlama3;  // Qwen2's tokenizer lacks Llama 3's tokens
  EXPECT_TRUE(absl::StrContains(PrepareDataset(o).status().message(), "has no special token <|start_header_id|>"));
  EXPECT_EQ(DataFormatFromName("chat"), DataFormat::kChat);
  EXPECT_EQ(DataFormatFromName("jsonl"), std::nullopt);
}

}  // namespace
}  // namespace colossal::io

namespace colossal::io {
namespace {

// A folder prepared once is reused only for the same request: other inputs,
// format or split are refused naming the field; a tokenizer that moved (same
// bytes) is the same.
TEST(PrepareDatasetTest, ManifestMatchesOnlyTheRequestThatMadeIt) {
  const std::string dir = MakeTestDir();
  WriteFile(dir + "/a.txt", MakeText(1, 4));
  WriteFile(dir + "/b.txt", MakeText(2, 4));
  PrepareOptions o = Options(dir + "/a.txt", dir + "/out");
  o.split = DocumentSplit::kParagraph;
  absl::StatusOr<PrepareResult> r = PrepareDataset(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(CheckManifestMatches(r->manifest_path, o).ok());

  PrepareOptions other = o;
  other.inputs = {dir + "/b.txt"};
  absl::Status s = CheckManifestMatches(r->manifest_path, other);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(s.message(), "prepared with inputs [\"" + dir + "/a.txt\"], not [\"" + dir + "/b.txt\"]"))
      << s;
  other = o;
  other.format = DataFormat::kChat;
  other.split = DocumentSplit::kLine;
  EXPECT_TRUE(absl::StrContains(CheckManifestMatches(r->manifest_path, other).message(),
                                "prepared with format \"text\", not \"chat\""));
  other = o;
  other.split = DocumentSplit::kFile;
  EXPECT_TRUE(absl::StrContains(CheckManifestMatches(r->manifest_path, other).message(), "with split"));
  other = o;
  other.val_fraction = 0.2;
  EXPECT_TRUE(absl::StrContains(CheckManifestMatches(r->manifest_path, other).message(), "with val_fraction"));

  WriteFile(dir + "/moved/tiny.tiktoken", ReadAll(kTinyTiktoken));
  other = o;
  other.tokenizer_path = dir + "/moved/tiny.tiktoken";
  EXPECT_TRUE(CheckManifestMatches(r->manifest_path, other).ok());
  other.tokenizer_path = "io/tokenizer/testdata/qwen2_tiny";
  EXPECT_TRUE(absl::StrContains(CheckManifestMatches(r->manifest_path, other).message(), "with tokenizer"));

  // An older manifest, without the fields added since, is taken for what it records.
  WriteFile(dir + "/old/manifest.json", R"({"format": "colossal.prepare/1", "inputs": [")" + dir + R"(/a.txt"]})");
  EXPECT_TRUE(CheckManifestMatches(dir + "/old/manifest.json", o).ok());
  other = o;
  other.format = DataFormat::kChat;
  other.split = DocumentSplit::kLine;
  EXPECT_FALSE(CheckManifestMatches(dir + "/old/manifest.json", other).ok());  // no format: text
}

}  // namespace
}  // namespace colossal::io
