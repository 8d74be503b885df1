#include "io/tokenizer/hf_tokenizer_json.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/common/file_util.h"
#include "io/tokenizer/load_tokenizer.h"
#include "io/tokenizer/text_tokenizer.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

using Json = nlohmann::json;

constexpr char kLlama3Dir[] = "io/tokenizer/testdata/llama3_tiny";
constexpr char kLlama3Json[] = "io/tokenizer/testdata/llama3_tiny/tokenizer.json";
constexpr char kLlama3Vectors[] = "io/tokenizer/testdata/llama3_tiny_vectors.json";
constexpr char kQwen2Dir[] = "io/tokenizer/testdata/qwen2_tiny";
constexpr char kQwen2Vectors[] = "io/tokenizer/testdata/qwen2_tiny_vectors.json";
constexpr char kGpt2Json[] = "io/tokenizer/testdata/gpt2_tiny/tokenizer.json";
constexpr char kGpt2Vectors[] = "io/tokenizer/testdata/gpt2_tiny_vectors.json";

Json ReadJson(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? Json::parse(*text) : Json();
}

std::string TestDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/hf_",
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

std::unique_ptr<TextTokenizer> LoadOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<TextTokenizer>> tok = LoadTokenizer(path);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

// Every case of a vectors file from tools/data/make_llama3_tokenizer_fixture.py:
// the `tokenizers` library's ids with and without special tokens, its decode,
// and our round trip (to the text's NFC form, when the file lists it: the
// tokenizer normalizes).
void ExpectMatchesVectors(const TextTokenizer& tok, const std::string& vectors_path) {
  const Json vectors = ReadJson(vectors_path);
  ASSERT_TRUE(vectors.contains("cases"));
  EXPECT_EQ(tok.vocab_size(), vectors["meta"]["vocab_size"].get<int32_t>());
  int checked = 0;
  for (const Json& c : vectors["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string text = c["text"].get<std::string>();
    absl::StatusOr<std::vector<int32_t>> with = tok.Encode(text, true);
    absl::StatusOr<std::vector<int32_t>> without = tok.Encode(text, false);
    ASSERT_TRUE(with.ok() && without.ok());
    EXPECT_EQ(*with, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(*without, c["ids_no_special"].get<std::vector<int32_t>>());
    absl::StatusOr<std::string> decoded = tok.Decode(*without);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, c["decoded"].get<std::string>());
    absl::StatusOr<std::string> round_trip = tok.Decode(tok.EncodeOrdinary(text));
    ASSERT_TRUE(round_trip.ok());
    EXPECT_EQ(*round_trip, c.value("nfc", text));
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

TEST(HfTokenizerJsonTest, Llama3StyleFolderMatchesTokenizersLibrary) {
  std::unique_ptr<TextTokenizer> tok = LoadOrDie(kLlama3Dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), "tokenizer.json");
  EXPECT_EQ(tok->path(), kLlama3Json);
  EXPECT_EQ(tok->vocab_size(), 610);
  EXPECT_EQ(tok->bos_id(), 600);  // <|begin_of_text|>
  EXPECT_EQ(tok->eos_id(), 601);  // <|end_of_text|> (tokenizer_config.json's eos_token)
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_EQ(tok->document_delimiter(), 600);
  ExpectMatchesVectors(*tok, kLlama3Vectors);
}

// Qwen2's tokenizer.json: NFC, one number a piece, no BOS, <|endoftext|>
// between documents (tokenizer_config.json's eos_token).
TEST(HfTokenizerJsonTest, Qwen2StyleFolderMatchesTokenizersLibrary) {
  std::unique_ptr<TextTokenizer> tok = LoadOrDie(kQwen2Dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), "tokenizer.json");
  EXPECT_EQ(tok->vocab_size(), 643);
  EXPECT_EQ(tok->bos_id(), std::nullopt);
  EXPECT_FALSE(tok->adds_bos());
  EXPECT_EQ(tok->eos_id(), 640);  // <|endoftext|>
  EXPECT_EQ(tok->document_delimiter(), 640);
  ExpectMatchesVectors(*tok, kQwen2Vectors);
}

TEST(HfTokenizerJsonTest, Qwen2NormalizesTextButNotSpecialTokens) {
  std::unique_ptr<TextTokenizer> tok = LoadOrDie(kQwen2Dir);
  ASSERT_NE(tok, nullptr);
  // "e" + U+0301 and U+00E9 are one text to a tokenizer with NFC.
  EXPECT_EQ(tok->EncodeOrdinary("caf\u00e9"), tok->EncodeOrdinary("cafe\u0301"));
  absl::StatusOr<std::vector<int32_t>> chat = tok->Encode("<|im_start|>e\u0301<|im_end|>", false);
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_GE(chat->size(), 3u);
  EXPECT_EQ(chat->front(), 641);
  EXPECT_EQ(chat->back(), 642);
  EXPECT_EQ(std::vector<int32_t>(chat->begin() + 1, chat->end() - 1), tok->EncodeOrdinary("\u00e9"));
  // Without the normalizer (the same file, NFC removed) the two differ.
  Json plain = ReadJson(absl::StrCat(kQwen2Dir, "/tokenizer.json"));
  plain["normalizer"] = nullptr;
  absl::StatusOr<HfTokenizerJson> raw = ParseHfTokenizerJson(plain.dump(), "qwen2 without NFC");
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->pretokenizer, Pretokenizer::kQwen2);
  EXPECT_NE(raw->tokenizer.EncodeOrdinary("caf\u00e9"), raw->tokenizer.EncodeOrdinary("cafe\u0301"));
}

TEST(HfTokenizerJsonTest, SpecialTokensInTextAreRecognizedLikeTransformers) {
  std::unique_ptr<TextTokenizer> tok = LoadOrDie(kLlama3Dir);
  ASSERT_NE(tok, nullptr);
  absl::StatusOr<std::vector<int32_t>> ids = tok->Encode("<|eot_id|>", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{600, 609}));
  // Training data keeps them as text: several ordinary tokens, no 609.
  const std::vector<int32_t> ordinary = tok->EncodeOrdinary("<|eot_id|>");
  EXPECT_GT(ordinary.size(), 1u);
  EXPECT_EQ(std::count(ordinary.begin(), ordinary.end(), 609), 0);
  absl::StatusOr<std::string> text = tok->Decode(std::vector<int32_t>{600, 609});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "<|begin_of_text|><|eot_id|>");
  EXPECT_FALSE(tok->Decode(std::vector<int32_t>{610}).ok());
}

TEST(HfTokenizerJsonTest, Gpt2StyleFileWithStringMerges) {
  std::unique_ptr<TextTokenizer> tok = LoadOrDie(kGpt2Json);
  ASSERT_NE(tok, nullptr);
  EXPECT_FALSE(tok->adds_bos());
  EXPECT_EQ(tok->bos_id(), std::nullopt);
  EXPECT_EQ(tok->eos_id(), 500);  // <|endoftext|>, found by name (no tokenizer_config.json)
  EXPECT_EQ(tok->document_delimiter(), 500);
  ExpectMatchesVectors(*tok, kGpt2Vectors);
}

TEST(HfTokenizerJsonTest, ParsedDirectly) {
  absl::StatusOr<HfTokenizerJson> hf = ReadHfTokenizerJson(kLlama3Json);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->pretokenizer, Pretokenizer::kLlama3);
  EXPECT_EQ(hf->prefix_ids, (std::vector<int32_t>{600}));
  EXPECT_TRUE(hf->suffix_ids.empty());
  EXPECT_EQ(hf->tokenizer.special_token_id("<|start_header_id|>"), 606);
  absl::StatusOr<HfTokenizerJson> gpt2 = ReadHfTokenizerJson(kGpt2Json);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_EQ(gpt2->pretokenizer, Pretokenizer::kGpt2);
  EXPECT_TRUE(gpt2->prefix_ids.empty());
}

// A broken copy of the Llama 3 fixture: the error names the file and the key.
struct BadCase {
  const char* name;
  void (*edit)(Json&);
  const char* key;
  const char* what;
};

const BadCase kBadCases[] = {
    {"model_type", [](Json& j) { j["model"]["type"] = "WordPiece"; }, "model.type", "\"WordPiece\" is not supported"},
    {"dropout", [](Json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout", "0.1 is not supported"},
    {"byte_fallback", [](Json& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback", "not supported"},
    {"suffix", [](Json& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, "model.end_of_word_suffix", "not supported"},
    {"no_vocab", [](Json& j) { j["model"].erase("vocab"); }, "model.vocab", "missing"},
    {"vocab_id", [](Json& j) { j["model"]["vocab"]["a"] = "x"; }, "model.vocab[\"a\"]", "is not an integer"},
    {"vocab_not_bytes", [](Json& j) { j["model"]["vocab"]["\u4e2d"] = 9999; }, "model.vocab[", "not a byte-level token"},
    {"merge_one_token", [](Json& j) { j["model"]["merges"][3] = "abc"; }, "model.merges[3]", "not two tokens"},
    {"merge_unknown", [](Json& j) { j["model"]["merges"][5] = Json::array({"zzzq", "a"}); }, "model.merges[5]",
     "\"zzzq\" is not in model.vocab"},
    {"merge_result", [](Json& j) { j["model"]["merges"][0] = Json::array({"q", "q"}); }, "model.merges[0]",
     "the merged token \"qq\" is not in model.vocab"},
    {"normalizer", [](Json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "normalizer.type", "\"NFKC\" is not supported"},
    {"normalizers", [](Json& j) { j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}}; },
     "normalizer.normalizers", "at most one normalizer"},
    {"normalizer_in_sequence", [](Json& j) { j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}}}}; },
     "normalizer.normalizers[0].type", "\"NFD\" is not supported"},
    {"pattern", [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+"; },
     "pre_tokenizer.pretokenizers[0].pattern.Regex", "is not supported"},
    {"pre_tokenizer_type", [](Json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer.type",
     "\"Whitespace\" is not supported"},
    {"prefix_space", [](Json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
     "pre_tokenizer.pretokenizers[1].add_prefix_space", "true is not supported"},
    {"lstrip", [](Json& j) { j["added_tokens"][2]["lstrip"] = true; }, "added_tokens[2].lstrip",
     "true is not supported"},
    {"decoder", [](Json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder.type", "not supported"},
    {"post_processor", [](Json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, "post_processor.type",
     "\"BertProcessing\" is not supported"},
    {"template_token", [](Json& j) { j["post_processor"]["processors"][1]["special_tokens"] = Json::object(); },
     "post_processor.processors[1].special_tokens", "no ids for \"<|begin_of_text|>\""},
};

TEST(HfTokenizerJsonTest, UnsupportedOrBrokenFilesNameTheFileAndKey) {
  const Json good = ReadJson(kLlama3Json);
  const std::string dir = TestDir();
  for (const BadCase& c : kBadCases) {
    SCOPED_TRACE(c.name);
    Json bad = good;
    c.edit(bad);
    const std::string path = absl::StrCat(dir, "/", c.name, ".json");
    WriteFile(path, bad.dump());
    absl::StatusOr<std::unique_ptr<TextTokenizer>> tok = LoadTokenizer(path);
    ASSERT_FALSE(tok.ok());
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(tok.status().message());
    EXPECT_TRUE(absl::StrContains(message, absl::StrCat(path, ": ", c.key))) << message;
    EXPECT_TRUE(absl::StrContains(message, c.what)) << message;
  }
  const std::string not_json = dir + "/broken.json";
  WriteFile(not_json, "{\"model\": ");
  EXPECT_TRUE(absl::StrContains(LoadTokenizer(not_json).status().message(), not_json + ": not a JSON object"));
}

TEST(HfTokenizerJsonTest, FolderChoosesTokenizerJsonThenModel) {
  const std::string dir = TestDir();
  absl::StatusOr<std::unique_ptr<TextTokenizer>> none = LoadTokenizer(dir);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(none.status().message(), dir)) << none.status();

  absl::StatusOr<std::string> model = ReadFileToString("io/tokenizer/testdata/spm_tiny/tokenizer.model");
  ASSERT_TRUE(model.ok());
  WriteFile(dir + "/tokenizer.model", *model);
  std::unique_ptr<TextTokenizer> spm = LoadOrDie(dir);
  ASSERT_NE(spm, nullptr);
  EXPECT_EQ(spm->kind(), "sentencepiece");

  absl::StatusOr<std::string> json = ReadFileToString(kLlama3Json);
  ASSERT_TRUE(json.ok());
  WriteFile(dir + "/tokenizer.json", *json);
  std::unique_ptr<TextTokenizer> preferred = LoadOrDie(dir);
  ASSERT_NE(preferred, nullptr);
  EXPECT_EQ(preferred->kind(), "tokenizer.json");
  // No tokenizer_config.json here: the EOS is found by name.
  EXPECT_EQ(preferred->eos_id(), 601);

  WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": {"content": "<|eot_id|>"}, "bos_token": null})");
  std::unique_ptr<TextTokenizer> instruct = LoadOrDie(dir);
  ASSERT_NE(instruct, nullptr);
  EXPECT_EQ(instruct->eos_id(), 609);
  EXPECT_EQ(instruct->document_delimiter(), 600);  // still the BOS
  WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  absl::StatusOr<std::unique_ptr<TextTokenizer>> bad = LoadTokenizer(dir);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "eos_token \"<|nope|>\"")) << bad.status();

  EXPECT_EQ(LoadTokenizer(dir + "/missing").status().code(), absl::StatusCode::kNotFound);

  // Llama 2's and Mistral's folders: tokenizer.model and transformers'
  // conversion of it (spm_tiny/converted_tokenizer.json: transformers 4.46's
  // LlamaTokenizerFast(vocab_file=tokenizer.model, from_slow=True)
  // .save_pretrained; a normalizer and byte fallback), which this reader
  // refuses: the tokenizer.model serves. With neither readable, both errors.
  const std::string llama2 = dir + "/llama2";
  ::mkdir(llama2.c_str(), 0755);
  absl::StatusOr<std::string> converted =
      ReadFileToString("io/tokenizer/testdata/spm_tiny/converted_tokenizer.json");
  ASSERT_TRUE(converted.ok());
  WriteFile(llama2 + "/tokenizer.json", *converted);
  absl::StatusOr<std::unique_ptr<TextTokenizer>> json_alone = LoadTokenizer(llama2);
  EXPECT_FALSE(json_alone.ok());
  EXPECT_TRUE(absl::StrContains(json_alone.status().message(), "normalizer")) << json_alone.status();
  WriteFile(llama2 + "/tokenizer.model", *model);
  std::unique_ptr<TextTokenizer> original = LoadOrDie(llama2);
  ASSERT_NE(original, nullptr);
  EXPECT_EQ(original->kind(), "sentencepiece");
  WriteFile(llama2 + "/tokenizer.model", "not a model");
  absl::StatusOr<std::unique_ptr<TextTokenizer>> neither = LoadTokenizer(llama2);
  EXPECT_TRUE(absl::StrContains(neither.status().message(), "normalizer")) << neither.status();
  EXPECT_TRUE(absl::StrContains(neither.status().message(), "not a SentencePiece model")) << neither.status();

  WriteFile(dir + "/vocab.txt", "x");
  EXPECT_TRUE(absl::StrContains(LoadTokenizer(dir + "/vocab.txt").status().message(), "expected a model folder"));
}

// OpenAI's GPT-2 release files (encoder.json + vocab.bpe), as a folder or as
// the encoder.json path: the same tokenizer as the tiktoken ranks of the same
// vocabulary, GPT-2's EOS; an encoder.json without its vocab.bpe names it.
TEST(HfTokenizerJsonTest, EncoderJsonAndVocabBpeFolderIsGpt2) {
  const std::string dir = TestDir();
  absl::StatusOr<std::string> encoder = ReadFileToString("io/tokenizer/testdata/tiny_encoder.json");
  absl::StatusOr<std::string> merges = ReadFileToString("io/tokenizer/testdata/tiny_vocab.bpe");
  ASSERT_TRUE(encoder.ok() && merges.ok());
  WriteFile(dir + "/encoder.json", *encoder);
  absl::StatusOr<std::unique_ptr<TextTokenizer>> alone = LoadTokenizer(dir);
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kNotFound) << alone.status();  // no vocab.bpe yet
  absl::StatusOr<std::unique_ptr<TextTokenizer>> file_alone = LoadTokenizer(dir + "/encoder.json");
  EXPECT_FALSE(file_alone.ok());
  EXPECT_TRUE(absl::StrContains(file_alone.status().message(), "vocab.bpe")) << file_alone.status();
  WriteFile(dir + "/vocab.bpe", *merges);
  std::unique_ptr<TextTokenizer> tiktoken = LoadOrDie("io/tokenizer/testdata/tiny.tiktoken");
  ASSERT_NE(tiktoken, nullptr);
  for (const std::string& path : {dir, dir + "/encoder.json"}) {
    std::unique_ptr<TextTokenizer> gym = LoadOrDie(path);
    ASSERT_NE(gym, nullptr) << path;
    EXPECT_EQ(gym->kind(), "encoder.json");
    EXPECT_EQ(gym->eos_id(), kGpt2EndOfTextId);
    EXPECT_FALSE(gym->adds_bos());
    for (const char* text : {"hello world, it's a test\n  of  spaces<|endoftext|>", "abc 123 !?"}) {
      absl::StatusOr<std::vector<int32_t>> a = gym->Encode(text, true);
      absl::StatusOr<std::vector<int32_t>> b = tiktoken->Encode(text, true);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(*a, *b) << text;
      EXPECT_GT(a->size(), 3u);
    }
  }
  // A model folder's own tokenizer.json still comes first.
  WriteFile(dir + "/tokenizer.json", *ReadFileToString(kGpt2Json));
  std::unique_ptr<TextTokenizer> preferred = LoadOrDie(dir);
  ASSERT_NE(preferred, nullptr);
  EXPECT_EQ(preferred->kind(), "tokenizer.json");
}

TEST(HfTokenizerJsonTest, TiktokenFileKeepsGpt2Behaviour) {
  std::unique_ptr<TextTokenizer> tok = LoadOrDie("io/tokenizer/testdata/tiny.tiktoken");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), "tiktoken");
  EXPECT_EQ(tok->eos_id(), kGpt2EndOfTextId);
  EXPECT_EQ(tok->document_delimiter(), kGpt2EndOfTextId);
  EXPECT_FALSE(tok->adds_bos());
  absl::StatusOr<std::vector<int32_t>> ids = tok->Encode("a<|endoftext|>", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->back(), kGpt2EndOfTextId);
}

}  // namespace
}  // namespace colossal::io
