// colossal::io — turning text into llm.c token shards: `colossal data prepare`.
//
// PrepareDataset reads text files, tokenizes them in parallel (GPT-2's BPE,
// or a Hugging Face model's tokenizer: io/tokenizer/load_tokenizer.h), and
// writes llm.c's .bin shards (io/shards/token_shard.h) and a manifest.json
// into an output folder:
//
//   colossal::io::PrepareOptions options;
//   options.inputs = {"~/.cache/colossal/data/corpus/shakespeare"};
//   options.output_dir = "data/shakespeare";
//   options.tokenizer_path = "~/.cache/colossal/data/gpt2.tiktoken";
//   options.name = "shakespeare";
//   options.progress = [](const colossal::io::PrepareProgress& p) { DrawBar(p.bytes_done, p.bytes_total); };
//   absl::StatusOr<colossal::io::PrepareResult> result = colossal::io::PrepareDataset(options);
//   if (!result.ok()) return result.status();  // names the file or folder at fault
//   // data/shakespeare/shakespeare_val_000000.bin, shakespeare_train_000000.bin, ..., manifest.json
//
// What it does, in order:
//  1. Inputs (inputs.h): files, folders searched recursively for *.txt, glob
//     patterns. Each file is one document, or each paragraph with
//     DocumentSplit::kParagraph (documents.h).
//  2. Split: documents go to val by a hash of their file name and paragraph
//     number until val holds about val_fraction of the text's bytes
//     (documents.h); the rest is train.
//  3. Tokens: each document becomes a delimiter followed by its tokens
//     (TextTokenizer::EncodeOrdinaryTo: special-token text in the data stays
//     text), as llm.c's fineweb.py and tinyshakespeare.py do: GPT-2's
//     <|endoftext|>, or the BOS of a tokenizer that adds one (Llama 3's
//     <|begin_of_text|>, Llama 2's <s>) — TextTokenizer::document_delimiter. Work is spread over
//     `threads` threads; results are written in document order, so the output
//     is byte-identical whatever the thread count, and on every re-run.
//  4. Shards: each split's tokens, in document order, fill
//     <name>_val_000000.bin, <name>_val_000001.bin, ... and
//     <name>_train_000000.bin, ... of exactly shard_tokens tokens each (the
//     last one of a split holds the rest; documents may straddle shards, as
//     in fineweb.py). Ids are uint16 when the vocabulary has at most 65,536
//     ids (llm.c's GPT-2 header, as before), else uint32 (llm.c's Llama 3
//     header). Each shard is written atomically (temporary name, fsync,
//     rename). Shards of an earlier run under the same name that this run
//     does not produce are removed afterwards; other files are not touched.
//  5. manifest.json, written last and atomically: the options that shape the
//     output, the tokenizer file's sha256, the inputs and files, document,
//     byte and token counts per split, and the shard list. It holds nothing
//     that varies between runs (no times, no thread count, no absolute paths
//     beyond those given).
//
// Chat data (format = DataFormat::kChat, for supervised fine-tuning): the
// inputs are JSON Lines files (folders contribute *.jsonl), each non-empty
// line one conversation (io/prepare/chat.h), and the split is by line. Each
// conversation is rendered with the chat template (chat_template, or the one
// the tokenizer folder's tokenizer_config.json names) in place of the
// delimiter + text of step 3, and each shard gets a loss mask beside it
// (<name>_train_000000.mask: io/shards/loss_mask.h) that counts the
// assistant's replies only and marks where each conversation starts; the data loader makes the other targets
// ignore_index. A line that is not a conversation fails naming file:line and
// the key. The manifest records the format, the template and how many tokens
// the masks count.
//
// Errors (absl::Status, naming the path): InvalidArgument for bad options,
// no inputs, an input folder without *.txt files, a pattern matching nothing,
// inputs with no text, or val_fraction > 0 with a single document (with a
// hint to split paragraphs); NotFound/PermissionDenied/... for unreadable
// inputs or tokenizer file; FailedPrecondition/PermissionDenied for an output
// folder that cannot be created or written.
#ifndef COLOSSAL_IO_PREPARE_PREPARE_H_
#define COLOSSAL_IO_PREPARE_PREPARE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "io/prepare/chat.h"
#include "io/prepare/documents.h"
#include "io/prepare/split_writer.h"

namespace colossal::io {

struct PrepareProgress {
  uint64_t bytes_done = 0;  // text bytes of the documents written so far
  uint64_t bytes_total = 0;
  int64_t documents_done = 0;
  int64_t documents_total = 0;
  int64_t tokens_done = 0;
};

// What the inputs hold: plain text, or chat conversations in JSON Lines.
enum class DataFormat { kText, kChat };
// "text" / "chat"; FromName: nullopt for any other name.
const char* DataFormatName(DataFormat format);
std::optional<DataFormat> DataFormatFromName(std::string_view name);

struct PrepareOptions {
  // Files, folders (recursive *.txt) and glob patterns; "~/" is $HOME.
  std::vector<std::string> inputs;
  // Created (with its parents) when missing.
  std::string output_dir;
  // A tokenizer LoadTokenizer takes: GPT-2 ranks in tiktoken format
  // (tools/data/fetch_gpt2_ranks.sh installs gpt2.tiktoken), a Hugging Face
  // model folder (tokenizer.json or tokenizer.model), or one of those files;
  // "~/" is $HOME. It must have a document delimiter (a BOS it adds, or an EOS).
  std::string tokenizer_path;
  // Shard file names start with it: <name>_train_000000.bin.
  std::string name = "data";
  // Share of the text's bytes for validation, in [0, 1).
  double val_fraction = 0.05;
  // Tokens per shard file, in [1, 2^31 - 1]. llm.c's fineweb.py uses 100M.
  int64_t shard_tokens = 10'000'000;
  // Tokenizing threads; 0 for one per core.
  int threads = 0;
  DocumentSplit split = DocumentSplit::kFile;  // kChat: must be kLine
  DataFormat format = DataFormat::kText;
  // kChat: the template; nullopt takes the tokenizer folder's (chat.h).
  std::optional<ChatTemplate> chat_template;
  // Text per unit of work: documents are grouped until a group has this many
  // bytes (a larger document is a group of its own).
  uint64_t batch_bytes = 1 << 20;
  // Called on the calling thread before any work (all zeros done), after each
  // group of documents is written, and at the end (bytes_done == bytes_total).
  std::function<void(const PrepareProgress&)> progress;
};

struct PrepareResult {
  std::vector<PreparedShard> shards;  // val shards first, then train, in order
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t train_documents = 0;
  int64_t val_documents = 0;
  uint64_t train_bytes = 0;
  uint64_t val_bytes = 0;
  // kChat: the tokens the loss masks count (the assistant's replies).
  int64_t train_counted_tokens = 0;
  int64_t val_counted_tokens = 0;
  std::optional<ChatTemplate> chat_template;  // the one used (kChat)
  std::string manifest_path;
};

absl::StatusOr<PrepareResult> PrepareDataset(const PrepareOptions& options);

// OK when the manifest.json at `manifest_path` records what `options` would
// (inputs, tokenizer path, format, split, val_fraction and a named
// chat_template; the tokenizer by path, or by its file's sha256 when it
// moved), so its folder's shards are this request's; else AlreadyExists
// naming the first field that differs and both values.
// Front ends that skip an already prepared folder call it first.
absl::Status CheckManifestMatches(const std::string& manifest_path, const PrepareOptions& options);

// The tokenizer's vocabulary size a manifest.json records (tokenizer.vocab_size),
// or nullopt when the file is unreadable or records none.
std::optional<int64_t> ManifestVocabSize(const std::string& manifest_path);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_PREPARE_PREPARE_H_
