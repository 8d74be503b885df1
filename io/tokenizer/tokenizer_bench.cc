// Encode and decode speed of the GPT-2 tokenizer on one core, in decimal MB/s
// of text (UTF-8 bytes in or out). Needs GPT-2's ranks: COLOSSAL_GPT2_RANKS,
// else ${COLOSSAL_DATA:-$HOME/.cache/colossal/data}/gpt2.tiktoken (installed
// by tools/data/fetch_gpt2_ranks.sh); without them each case skips and says so.
//
//   bazel run -c opt //io/tokenizer:tokenizer_bench
//
// Texts (1 MB each, generated from a fixed seed so runs compare):
//   english  words drawn with a Zipf-like law from a list of common words,
//            capitals, punctuation, numbers, paragraphs: what a corpus looks like
//   mixed    english with code, CJK, emoji and accented words mixed in
//   unique   random lower-case words that never repeat: every piece misses
//            the cache and runs the merge loop (worst case)
// "cold" variants disable the piece cache.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "io/tokenizer/tokenizer.h"

namespace colossal::io {
namespace {

constexpr size_t kTextBytes = 1 << 20;

std::string RanksPath() {
  if (const char* p = std::getenv("COLOSSAL_GPT2_RANKS"); p != nullptr && *p != '\0') return p;
  if (const char* d = std::getenv("COLOSSAL_DATA"); d != nullptr && *d != '\0') {
    return std::string(d) + "/gpt2.tiktoken";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/colossal/data/gpt2.tiktoken";
}

// Loads the tokenizer once per cache setting; nullptr (and the reason) if impossible.
const Tokenizer* GetTokenizer(bool cache, std::string* error) {
  static std::string load_error;
  static std::unique_ptr<Tokenizer> tokenizers[2];
  static bool loaded = false;
  if (!loaded) {
    loaded = true;
    for (int i = 0; i < 2; ++i) {
      TokenizerOptions options;
      if (i == 0) options.cache_entries = 0;
      absl::StatusOr<Tokenizer> tok = Tokenizer::FromTiktokenFile(RanksPath(), options);
      if (!tok.ok()) {
        load_error = std::string(tok.status().message()) + " (run tools/data/fetch_gpt2_ranks.sh)";
        break;
      }
      tokenizers[i] = std::make_unique<Tokenizer>(std::move(tok).value());
    }
  }
  *error = load_error;
  return tokenizers[cache ? 1 : 0].get();
}

const char* const kWords[] = {
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are", "with",
    "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by", "not", "word",
    "but", "what", "some", "we", "can", "out", "other", "were", "all", "there", "when", "up", "use", "your",
    "how", "said", "an", "each", "she", "which", "do", "their", "time", "if", "will", "way", "about", "many",
    "then", "them", "write", "would", "like", "so", "these", "her", "long", "make", "thing", "see", "him",
    "two", "has", "look", "more", "day", "could", "go", "come", "did", "number", "sound", "no", "most",
    "people", "my", "over", "know", "water", "than", "call", "first", "who", "may", "down", "side", "been",
    "now", "find", "government", "university", "development", "information", "international", "between",
    "important", "experience", "understanding", "responsibility", "characteristics", "tokenization",
    "don't", "it's", "we're", "they've", "I'll", "you'd", "isn't", "photosynthesis", "Mediterranean",
    "approximately", "nevertheless", "infrastructure", "transformer", "gradient", "optimizer", "parallel",
};

std::string EnglishText(std::mt19937& rng, size_t bytes) {
  std::string text;
  // Zipf-like: word k with probability ~ 1/(k+1).
  std::vector<double> weights;
  for (size_t k = 0; k < std::size(kWords); ++k) weights.push_back(1.0 / (k + 1));
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  bool sentence_start = true;
  while (text.size() < bytes) {
    std::string word = kWords[pick(rng)];
    if (sentence_start && word[0] >= 'a' && word[0] <= 'z') word[0] = static_cast<char>(word[0] - 'a' + 'A');
    if (rng() % 40 == 0) word = std::to_string(rng() % 100000);
    text += word;
    sentence_start = false;
    const uint32_t r = rng() % 100;
    if (r < 8) {
      text += ". ";
      sentence_start = true;
    } else if (r < 13) {
      text += ", ";
    } else if (r < 14) {
      text += ".\n\n";
      sentence_start = true;
    } else {
      text += ' ';
    }
  }
  return text;
}

std::string MixedText(std::mt19937& rng, size_t bytes) {
  const char* const extras[] = {
      "def f(x):\n    return x ** 2  # square\n",
      "for (int i = 0; i < n; ++i) { sum += a[i]; }\n",
      "你好，世界。今天天气很好！",
      "日本語のテキストとカタカナ。",
      "🙂👍🏽 🚀🤖 ",
      "café naïve résumé Ångström ",
      "Здравствуй мир, Καλημέρα κόσμε. ",
      "{\"key\": [1, 2.5, \"three\"], \"ok\": true}\n",
  };
  std::string text;
  while (text.size() < bytes) {
    text += EnglishText(rng, 300);
    text += extras[rng() % std::size(extras)];
  }
  return text;
}

std::string UniqueWords(std::mt19937& rng, size_t bytes) {
  std::string text;
  while (text.size() < bytes) {
    const size_t n = 3 + rng() % 9;
    text += ' ';
    for (size_t i = 0; i < n; ++i) text += static_cast<char>('a' + rng() % 26);
  }
  return text;
}

const std::string& Text(int which) {
  static const std::string* texts[3] = {};
  if (texts[which] == nullptr) {
    std::mt19937 rng(20240520 + which);
    texts[which] = new std::string(which == 0   ? EnglishText(rng, kTextBytes)
                                   : which == 1 ? MixedText(rng, kTextBytes)
                                                : UniqueWords(rng, kTextBytes));
  }
  return *texts[which];
}

const char* const kTextNames[] = {"english", "mixed", "unique"};

// range(0): text; range(1): 1 with the piece cache, 0 without.
void BM_Encode(benchmark::State& state) {
  std::string error;
  const Tokenizer* tok = GetTokenizer(state.range(1) != 0, &error);
  if (tok == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  const std::string& text = Text(static_cast<int>(state.range(0)));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 2);
  size_t tokens = 0;
  for (auto _ : state) {
    ids.clear();
    tok->EncodeOrdinaryTo(text, &ids);
    benchmark::DoNotOptimize(ids.data());
    tokens = ids.size();
  }
  state.counters["MB/s"] = benchmark::Counter(1e-6 * text.size(), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes/token"] = static_cast<double>(text.size()) / tokens;
  state.SetLabel(std::string(kTextNames[state.range(0)]) + (state.range(1) ? "" : " cold"));
}
BENCHMARK(BM_Encode)->ArgsProduct({{0, 1, 2}, {1, 0}})->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  std::string error;
  const Tokenizer* tok = GetTokenizer(true, &error);
  if (tok == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  const std::string& text = Text(static_cast<int>(state.range(0)));
  const std::vector<int32_t> ids = tok->EncodeOrdinary(text);
  for (auto _ : state) {
    absl::StatusOr<std::string> out = tok->Decode(ids);
    benchmark::DoNotOptimize(out->data());
  }
  state.counters["MB/s"] = benchmark::Counter(1e-6 * text.size(), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kTextNames[state.range(0)]);
}
BENCHMARK(BM_Decode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace colossal::io

BENCHMARK_MAIN();
