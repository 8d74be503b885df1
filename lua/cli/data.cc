// `colossal data prepare`: text files -> llm.c token shards (io/prepare), with
// GPT-2's tokenizer or a Hugging Face model's (Llama 3 tokenizer.json, Llama 2
// tokenizer.model).
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status/suggest.h"
#include "io/prepare/prepare.h"
#include "lua/api/generation.h"
#include "lua/api/lua_util.h"
#include "lua/cli/commands.h"
#include "lua/cli/flags.h"

namespace colossal::lua::cli {
namespace {

constexpr char kDataUsage[] =
    "usage: colossal data prepare --input FILE|DIR|GLOB... --output DIR [options]\n"
    "\n"
    "subcommands:\n"
    "  prepare    tokenize text into llm.c token shards and a manifest.json\n";

constexpr FlagSpec kPrepareFlags[] = {
    {"--input", FlagKind::kList, "PATH...", "text files, folders (*.txt, recursive; *.jsonl with --format chat) or globs"},
    {"--output", FlagKind::kValue, "DIR", "where the shards and manifest.json go"},
    {"--val_fraction", FlagKind::kValue, "F", "share of the text for validation (0.05)"},
    {"--tokenizer", FlagKind::kValue, "DIR|FILE",
     "a Hugging Face model folder (tokenizer.json, else tokenizer.model), one such file, "
     "GPT-2 ranks (default $COLOSSAL_DATA/gpt2.tiktoken) or OpenAI's encoder.json with its vocab.bpe"},
    {"--threads", FlagKind::kValue, "N", "tokenizing threads (0: one per core)"},
    {"--name", FlagKind::kValue, "NAME", "shard file prefix: NAME_train_000000.bin (data)"},
    {"--split", FlagKind::kValue, "file|paragraph|line",
     "a document is a file (default), a blank-line-separated paragraph or a line"},
    {"--format", FlagKind::kValue, "text|chat",
     "text (default), or chat: JSON Lines conversations (*.jsonl) for fine-tuning, with loss masks"},
    {"--chat_template", FlagKind::kValue, "NAME",
     "chat: llama3, llama3.1 (also 3.2's), chatml, qwen2 or qwen2.5 (default: the tokenizer folder's "
     "tokenizer_config.json's)"},
};

std::string PrepareUsage() {
  return absl::StrCat(
      "usage: colossal data prepare --input FILE|DIR|GLOB... --output DIR [options]\n\n"
      "Tokenizes text into llm.c .bin shards (val first, then train) and writes\n"
      "manifest.json. The same inputs give byte-identical output. The tokenizer is\n"
      "GPT-2's BPE by default, or a Hugging Face model's (--tokenizer DIR): each\n"
      "document starts with its BOS (Llama: <|begin_of_text|>, <s>) or else its EOS\n"
      "(GPT-2: <|endoftext|>); ids are uint16 (llm.c's GPT-2 header) when the\n"
      "vocabulary has at most 65536 ids, else uint32 (llm.c's Llama 3 header).\n\n"
      "--format chat reads one conversation a line, {\"messages\": [{\"role\": \"user\",\n"
      "\"content\": ...}, {\"role\": \"assistant\", ...}]} (or ShareGPT's \"conversations\"),\n"
      "renders it with the model's chat template (Llama 3's, 3.1's, Qwen2's, ...) and\n"
      "writes a loss mask beside each shard (NAME_train_000000.mask) that counts the\n"
      "assistant's replies only: training on the shards learns the answers, not the\n"
      "questions.\n\n",
      FlagHelp(kPrepareFlags));
}

// Progress: a redrawn bar on a terminal, a line per 10% otherwise.
struct Progress {
  bool tty = isatty(STDERR_FILENO) != 0;
  int last_decile = -1;
  bool drawn = false;

  void operator()(const io::PrepareProgress& p) {
    const double share =
        p.bytes_total == 0 ? 1.0 : static_cast<double>(p.bytes_done) / p.bytes_total;
    if (tty) {
      drawn = p.bytes_done != p.bytes_total;  // a bar line is open
      const int width = 40, filled = static_cast<int>(share * width);
      std::fprintf(stderr, "\r[%s%s] %5.1f%%  %lld/%lld documents  %lld tokens",
                   std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(),
                   100 * share, static_cast<long long>(p.documents_done),
                   static_cast<long long>(p.documents_total),
                   static_cast<long long>(p.tokens_done));
      if (p.bytes_done == p.bytes_total) std::fputc('\n', stderr);
      return;
    }
    const int decile = static_cast<int>(share * 10);
    if (decile == last_decile) return;
    last_decile = decile;
    std::fprintf(stderr, "prepare: %3d%%  %lld/%lld documents  %lld tokens\n", decile * 10,
                 static_cast<long long>(p.documents_done),
                 static_cast<long long>(p.documents_total), static_cast<long long>(p.tokens_done));
  }
};

int Prepare(const Args& args) {
  const std::string usage = PrepareUsage();
  auto flags = ParseFlags(args, kPrepareFlags, /*stop_at_positional=*/false);
  if (!flags.ok()) return FailStatus("data prepare", flags.status(), usage);
  if (flags->help) {
    std::fputs(usage.c_str(), stdout);
    return kExitOk;
  }
  if (!flags->positional.empty()) {
    return Fail("data prepare",
                absl::StrCat("unexpected argument '", flags->positional[0],
                             "' (inputs go after --input)"),
                kExitUsage, usage);
  }
  if (!flags->has("--input")) return Fail("data prepare", "--input is required", kExitUsage, usage);
  if (!flags->has("--output")) {
    return Fail("data prepare", "--output is required", kExitUsage, usage);
  }
  io::PrepareOptions options;
  options.inputs = flags->values.at("--input");
  options.output_dir = flags->value("--output");
  options.name = flags->value("--name", options.name);
  auto val = DoubleFlag(*flags, "--val_fraction", options.val_fraction);
  if (!val.ok()) return FailStatus("data prepare", val.status(), usage);
  if (!(*val >= 0 && *val < 1)) {
    return Fail("data prepare", absl::StrCat("--val_fraction must be in [0, 1), got ", *val),
                kExitUsage, usage);
  }
  options.val_fraction = *val;
  const std::string format = flags->value("--format", "text");
  if (std::optional<io::DataFormat> f = io::DataFormatFromName(format)) {
    options.format = *f;
  } else {
    return Fail("data prepare", absl::StrCat("--format must be text or chat, got '", format, "'"), kExitUsage,
                usage);
  }
  const bool chat = options.format == io::DataFormat::kChat;
  if (flags->has("--chat_template")) {
    const std::string name = flags->value("--chat_template");
    if (!chat) return Fail("data prepare", "--chat_template goes with --format chat", kExitUsage, usage);
    options.chat_template = io::ChatTemplateFromName(name);
    if (!options.chat_template) {
      return Fail("data prepare", absl::StrCat("--chat_template must be one of ", io::ChatTemplateNames(), ", got '", name, "'"),
                  kExitUsage, usage);
    }
  }
  const std::string split = flags->value("--split", chat ? "line" : "file");
  if (std::optional<io::DocumentSplit> s = io::DocumentSplitFromName(split)) {
    options.split = *s;
  } else {
    return Fail("data prepare", absl::StrCat("--split must be file, paragraph or line, got '", split, "'"),
                kExitUsage, usage);
  }
  auto threads = IntFlag(*flags, "--threads", 0, 0, 4096);
  if (!threads.ok()) return FailStatus("data prepare", threads.status(), usage);
  options.threads = *threads;
  if (flags->has("--tokenizer")) {
    options.tokenizer_path = flags->value("--tokenizer");
  } else {
    options.tokenizer_path = DefaultTokenizerPath();
    if (absl::Status s = DefaultTokenizerInstalled(); !s.ok()) return FailStatus("data prepare", s);
  }
  Progress progress;
  options.progress = [&progress](const io::PrepareProgress& p) { progress(p); };
  absl::StatusOr<io::PrepareResult> result = io::PrepareDataset(options);
  if (progress.tty && progress.drawn && !result.ok()) std::fputc('\n', stderr);
  if (!result.ok()) {
    // The codes a recipe's data preparation exits with for the same cause:
    // an input that names nothing or cannot give the dataset asked for is
    // the user's mistake (2), an unreadable file a runtime failure (1).
    return Fail("data prepare", result.status().message(), ExitCodeOf(result.status().code()));
  }
  std::printf("train: %lld documents, %llu bytes, %lld tokens\n",
              static_cast<long long>(result->train_documents),
              static_cast<unsigned long long>(result->train_bytes),
              static_cast<long long>(result->train_tokens));
  std::printf("val:   %lld documents, %llu bytes, %lld tokens\n",
              static_cast<long long>(result->val_documents),
              static_cast<unsigned long long>(result->val_bytes),
              static_cast<long long>(result->val_tokens));
  if (result->chat_template) {
    std::printf("chat (%s): the loss counts %lld train and %lld val tokens (the replies)\n",
                io::ChatTemplateName(*result->chat_template),
                static_cast<long long>(result->train_counted_tokens),
                static_cast<long long>(result->val_counted_tokens));
  }
  std::printf("%zu shards, manifest %s\n", result->shards.size(), result->manifest_path.c_str());
  return kExitOk;
}

}  // namespace

int DataCommand(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    if (args.empty()) return Fail("data", "which one? (prepare)", kExitUsage, kDataUsage);
    std::fputs(kDataUsage, stdout);
    return kExitOk;
  }
  if (args[0] == "prepare") return Prepare(Args(args.begin() + 1, args.end()));
  return Fail("data",
              absl::StrCat("unknown subcommand '", args[0], "'",
                           core::did_you_mean(args[0], {absl::string_view("prepare")})),
              kExitUsage, kDataUsage);
}

}  // namespace colossal::lua::cli
