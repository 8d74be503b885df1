#include "io/prepare/prepare.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "io/common/absl_view.h"
#include "io/common/atomic_file.h"
#include "io/common/file_util.h"
#include "io/common/sha256.h"
#include "io/prepare/inputs.h"
#include "io/shards/loss_mask.h"
#include "io/shards/token_shard.h"
#include "io/tokenizer/load_tokenizer.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr char kManifestFormat[] = "colossal.prepare/1";

absl::Status Invalid(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("prepare: ", ToAbsl(what)));
}

absl::Status CheckOptions(const PrepareOptions& o) {
  if (o.output_dir.empty()) return Invalid("no output folder given");
  if (o.tokenizer_path.empty()) {
    return Invalid("no tokenizer given (gpt2.tiktoken: tools/data/fetch_gpt2_ranks.sh, or a model folder)");
  }
  if (o.name.empty() || o.name.find('/') != std::string::npos) {
    return Invalid(absl::StrCat("name '", o.name, "' must be a non-empty file name prefix without '/'"));
  }
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    return Invalid(absl::StrCat("val_fraction ", o.val_fraction, " must be in [0, 1)"));
  }
  if (o.shard_tokens < 1 || o.shard_tokens > kTokenShardMaxTokens) {
    return Invalid(absl::StrCat("shard_tokens ", o.shard_tokens, " must be in [1, ", kTokenShardMaxTokens, "]"));
  }
  if (o.threads < 0) return Invalid(absl::StrCat("threads ", o.threads, " must be 0 (one per core) or more"));
  if (o.batch_bytes == 0) return Invalid("batch_bytes must be positive");
  if (o.format == DataFormat::kChat && o.split != DocumentSplit::kLine) {
    return Invalid(absl::StrCat("chat data is one conversation a line: split must be \"line\", not \"",
                                DocumentSplitName(o.split), "\""));
  }
  return absl::OkStatus();
}

// mkdir -p, then a check that the folder takes new files.
absl::Status PrepareOutputDir(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string prefix = slash == std::string::npos ? dir : dir.substr(0, slash);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, "cannot create output folder", prefix);
    }
    if (slash == std::string::npos) break;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot create output folder", dir);
  if (!S_ISDIR(st.st_mode)) return ErrnoStatus(ENOTDIR, "cannot create output folder", dir);
  if (::access(dir.c_str(), W_OK) != 0) return ErrnoStatus(errno, "cannot write to output folder", dir);
  return absl::OkStatus();
}

// Reads bytes [begin, end) of `file` into *out.
absl::Status ReadRange(const InputFile& file, uint64_t begin, uint64_t end, std::string* out) {
  const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot read input", file.path);
  out->resize(end - begin);
  uint64_t got = 0;
  while (got < out->size()) {
    const ssize_t n = ::pread(fd, out->data() + got, out->size() - got, static_cast<off_t>(begin + got));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot read input", file.path);
    }
    if (n == 0) break;
    got += static_cast<uint64_t>(n);
  }
  ::close(fd);
  if (got != out->size()) {
    return absl::DataLossError(absl::StrCat("input '", file.path, "' changed while being read: it had ", file.bytes,
                                            " bytes, now ends at ", begin + got));
  }
  return absl::OkStatus();
}

// Documents [first, last) go to one worker at a time.
struct Batch {
  size_t first = 0;
  size_t last = 0;
};

struct BatchResult {
  absl::Status status;
  std::vector<int32_t> tokens;     // every document's tokens, back to back
  std::vector<uint8_t> counted;    // chat: a loss-mask value per token
  std::vector<size_t> doc_tokens;  // tokens per document
};

std::vector<Batch> MakeBatches(const std::vector<Document>& docs, uint64_t batch_bytes) {
  std::vector<Batch> batches;
  uint64_t bytes = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (batches.empty() || bytes >= batch_bytes) {
      batches.push_back({i, i});
      bytes = 0;
    }
    batches.back().last = i + 1;
    bytes += docs[i].bytes();
  }
  return batches;
}

// Appends one conversation (a JSON line) to `result`.
absl::Status RenderConversation(const ChatRenderer& chat, const InputFile& file, const Document& doc,
                                std::string_view line, BatchResult* result) {
  absl::StatusOr<std::vector<ChatMessage>> conversation = ParseConversation(line);
  if (!conversation.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path, ":", doc.line, ": ", conversation.status().message()));
  }
  const size_t first = result->counted.size();
  chat.Render(*conversation, &result->tokens, &result->counted);
  if (result->counted.size() > first) result->counted[first] |= kDocumentStart;  // the loader's row cuts
  return absl::OkStatus();
}

// Text documents start with `eot`; with `chat` each document is a
// conversation rendered by its template.
BatchResult TokenizeBatch(const TextTokenizer& tok, int32_t eot, const ChatRenderer* chat,
                          std::span<const InputFile> files, std::span<const Document> docs) {
  BatchResult result;
  std::string text;
  size_t i = 0;
  while (i < docs.size()) {
    // Documents of one file in a row are read with one pread.
    size_t j = i + 1;
    while (j < docs.size() && docs[j].file == docs[i].file && docs[j].begin >= docs[j - 1].end) ++j;
    const InputFile& file = files[docs[i].file];
    result.status = ReadRange(file, docs[i].begin, docs[j - 1].end, &text);
    if (!result.status.ok()) return result;
    for (size_t d = i; d < j; ++d) {
      const size_t before = result.tokens.size();
      const std::string_view doc = std::string_view(text).substr(docs[d].begin - docs[i].begin, docs[d].bytes());
      if (chat != nullptr) {
        result.status = RenderConversation(*chat, file, docs[d], doc, &result);
        if (!result.status.ok()) return result;
      } else {
        result.tokens.push_back(eot);
        tok.EncodeOrdinaryTo(doc, &result.tokens);
      }
      result.doc_tokens.push_back(result.tokens.size() - before);
    }
    i = j;
  }
  return result;
}

// Tokenizes batches on `threads` threads and hands results to `consume` on
// the calling thread in batch order, with at most 2 * threads batches in
// flight. Stops at the first error (a batch's or consume's).
absl::Status TokenizeInOrder(int threads, size_t num_batches, const std::function<BatchResult(size_t)>& work,
                             const std::function<absl::Status(size_t, BatchResult&)>& consume) {
  absl::Mutex mu;
  size_t next = 0;      // the next batch a worker takes
  size_t consumed = 0;  // batches consumed so far
  bool stop = false;
  std::map<size_t, BatchResult> done;
  const size_t max_in_flight = 2 * static_cast<size_t>(threads);

  auto worker = [&] {
    while (true) {
      size_t b;
      {
        absl::MutexLock lock(&mu);
        auto can_take = [&] { return stop || next >= num_batches || next < consumed + max_in_flight; };
        mu.Await(absl::Condition(&can_take));
        if (stop || next >= num_batches) return;
        b = next++;
      }
      BatchResult result = work(b);
      absl::MutexLock lock(&mu);
      done.emplace(b, std::move(result));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);

  absl::Status status;
  for (size_t b = 0; b < num_batches && status.ok(); ++b) {
    BatchResult result;
    {
      absl::MutexLock lock(&mu);
      auto ready = [&] { return done.count(b) != 0; };
      mu.Await(absl::Condition(&ready));
      result = std::move(done[b]);
      done.erase(b);
      consumed = b + 1;
    }
    status = result.status.ok() ? consume(b, result) : result.status;
  }
  {
    absl::MutexLock lock(&mu);
    stop = true;
  }
  for (std::thread& t : pool) t.join();
  return status;
}

// Removes <name>_{train,val}_NNNNNN.bin and .mask files that `keep` does not list.
absl::Status RemoveStaleShards(const std::string& dir, const std::string& name, const std::set<std::string>& keep) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "cannot list output folder", dir);
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string file = e->d_name;
    if (keep.count(file) != 0) continue;
    for (const char* split : {"train", "val"}) {
      const std::string prefix = absl::StrCat(name, "_", split, "_");
      for (const std::string_view ext : {std::string_view(".bin"), std::string_view(".mask")}) {
        const size_t digits_end = file.size() - ext.size();
        if (file.size() == prefix.size() + 6 + ext.size() && absl::StartsWith(file, prefix) &&
            absl::EndsWith(file, ToAbsl(ext)) &&
            std::all_of(file.begin() + prefix.size(), file.begin() + digits_end,
                        [](char c) { return c >= '0' && c <= '9'; })) {
          stale.push_back(file);
        }
      }
    }
  }
  ::closedir(d);
  for (const std::string& file : stale) {
    const std::string path = absl::StrCat(dir, "/", file);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, "cannot remove stale shard", path);
  }
  return absl::OkStatus();
}

std::string ManifestText(const PrepareOptions& o, const std::string& tokenizer_sha256, const TextTokenizer& tok,
                         int32_t eot, TokenWidth width, const std::vector<InputFile>& files, const std::vector<Document>& docs,
                         const PrepareResult& r) {
  OrderedJson manifest = OrderedJson::object();
  manifest["format"] = kManifestFormat;
  manifest["name"] = o.name;
  // eot_token: the token that starts every document (the name is llm.c's).
  manifest["tokenizer"] = {{"path", o.tokenizer_path},
                           {"file", tok.path().substr(tok.path().rfind('/') + 1)},  // the file read
                           {"kind", tok.kind()},
                           {"sha256", tokenizer_sha256},
                           {"vocab_size", tok.vocab_size()},
                           {"eot_token", eot},
                           {"token_dtype", TokenWidthName(width)}};
  manifest["options"] = {{"val_fraction", o.val_fraction},
                         {"shard_tokens", o.shard_tokens},
                         {"split", DocumentSplitName(o.split)},
                         {"format", DataFormatName(o.format)}};
  if (r.chat_template) manifest["options"]["chat_template"] = ChatTemplateName(*r.chat_template);
  manifest["inputs"] = o.inputs;
  std::vector<int64_t> documents(files.size(), 0), val_documents(files.size(), 0);
  for (const Document& d : docs) {
    ++documents[d.file];
    val_documents[d.file] += d.val ? 1 : 0;
  }
  OrderedJson file_list = OrderedJson::array();
  for (size_t f = 0; f < files.size(); ++f) {
    file_list.push_back({{"path", files[f].path},
                         {"bytes", files[f].bytes},
                         {"documents", documents[f]},
                         {"val_documents", val_documents[f]}});
  }
  manifest["files"] = std::move(file_list);
  manifest["documents"] = {{"train", r.train_documents}, {"val", r.val_documents}};
  manifest["bytes"] = {{"train", r.train_bytes}, {"val", r.val_bytes}};
  manifest["tokens"] = {{"train", r.train_tokens}, {"val", r.val_tokens}};
  // Chat: the tokens the loss masks count (the replies the model learns).
  if (r.chat_template) manifest["counted_tokens"] = {{"train", r.train_counted_tokens}, {"val", r.val_counted_tokens}};
  OrderedJson shards = OrderedJson::array();
  for (const PreparedShard& s : r.shards) {
    OrderedJson entry = {{"file", s.file}, {"split", s.split}, {"tokens", s.tokens}};
    if (!s.mask_file.empty()) {
      entry["mask"] = s.mask_file;
      entry["counted"] = s.counted;
    }
    shards.push_back(std::move(entry));
  }
  manifest["shards"] = std::move(shards);
  // Paths are bytes; anything not UTF-8 becomes U+FFFD rather than failing.
  return manifest.dump(2, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

}  // namespace

const char* DataFormatName(DataFormat format) { return format == DataFormat::kChat ? "chat" : "text"; }

std::optional<DataFormat> DataFormatFromName(std::string_view name) {
  if (name == "text") return DataFormat::kText;
  if (name == "chat") return DataFormat::kChat;
  return std::nullopt;
}

absl::StatusOr<PrepareResult> PrepareDataset(const PrepareOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  const std::string output_dir = ExpandHome(options.output_dir);
  const std::string tokenizer_path = ExpandHome(options.tokenizer_path);

  absl::StatusOr<std::unique_ptr<TextTokenizer>> loaded = LoadTokenizer(tokenizer_path);
  if (!loaded.ok()) return loaded.status();
  const TextTokenizer* tok = loaded->get();
  const std::optional<int32_t> eot = tok->document_delimiter();
  if (!eot) {
    return Invalid(absl::StrCat("tokenizer '", tok->path(),
                                "' has no token to start documents with (neither a BOS it adds nor an EOS)"));
  }
  const TokenWidth width = TokenWidthForVocab(tok->vocab_size());
  absl::StatusOr<std::string> tokenizer_sha256 = Sha256OfFile(tok->path());
  if (!tokenizer_sha256.ok()) return tokenizer_sha256.status();

  const bool chat_data = options.format == DataFormat::kChat;
  std::optional<ChatRenderer> chat;
  PrepareResult result;
  if (chat_data) {
    absl::StatusOr<ChatTemplate> t =
        options.chat_template ? absl::StatusOr<ChatTemplate>(*options.chat_template) : DetectChatTemplate(tok->path());
    if (!t.ok()) return t.status();
    absl::StatusOr<ChatRenderer> renderer = ChatRenderer::Create(*tok, *t);
    if (!renderer.ok()) return renderer.status();
    chat.emplace(*std::move(renderer));
    result.chat_template = *t;
  }

  absl::StatusOr<std::vector<InputFile>> files = ResolveInputs(options.inputs, chat_data ? ".jsonl" : ".txt");
  if (!files.ok()) return files.status();
  absl::StatusOr<std::vector<Document>> docs = SplitDocuments(*files, options.split);
  if (!docs.ok()) return docs.status();
  if (docs->empty()) {
    return Invalid(absl::StrCat("the inputs (", files->size(), files->size() == 1 ? " file" : " files",
                                ") hold no text"));
  }
  const size_t val_documents = AssignValidation(options.val_fraction, &*docs);
  if (options.val_fraction > 0 && val_documents == 0) {
    return Invalid(absl::StrCat(
        "val_fraction ", options.val_fraction, " needs at least two documents, but the inputs are one document ('",
        (*files)[(*docs)[0].file].path, "'): split it into paragraphs (recipe data.split = \"paragraph\", data prepare --split paragraph), or set val_fraction 0"));
  }
  if (absl::Status s = PrepareOutputDir(output_dir); !s.ok()) return s;

  PrepareProgress progress;
  progress.documents_total = static_cast<int64_t>(docs->size());
  for (const Document& d : *docs) progress.bytes_total += d.bytes();
  if (options.progress) options.progress(progress);

  SplitWriter train(output_dir, options.name, "train", options.shard_tokens, width, chat_data);
  SplitWriter val(output_dir, options.name, "val", options.shard_tokens, width, chat_data);
  const std::vector<Batch> batches = MakeBatches(*docs, options.batch_bytes);
  const int threads =
      options.threads > 0 ? options.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  auto work = [&](size_t b) {
    return TokenizeBatch(*tok, *eot, chat ? &*chat : nullptr, *files,
                         std::span<const Document>(*docs).subspan(batches[b].first, batches[b].last - batches[b].first));
  };
  auto consume = [&](size_t b, BatchResult& batch) -> absl::Status {
    size_t offset = 0;
    for (size_t i = batches[b].first; i < batches[b].last; ++i) {
      const Document& d = (*docs)[i];
      const size_t n = batch.doc_tokens[i - batches[b].first];
      SplitWriter& out = d.val ? val : train;
      const std::span<const uint8_t> counted =
          chat_data ? std::span<const uint8_t>(batch.counted).subspan(offset, n) : std::span<const uint8_t>();
      if (absl::Status s = out.Append(std::span<const int32_t>(batch.tokens).subspan(offset, n), counted); !s.ok()) {
        return s;
      }
      offset += n;
      (d.val ? result.val_documents : result.train_documents) += 1;
      (d.val ? result.val_bytes : result.train_bytes) += d.bytes();
      progress.bytes_done += d.bytes();
      progress.documents_done += 1;
      progress.tokens_done += static_cast<int64_t>(n);
    }
    if (options.progress) options.progress(progress);
    return absl::OkStatus();
  };
  if (absl::Status s = TokenizeInOrder(threads, batches.size(), work, consume); !s.ok()) return s;
  if (absl::Status s = val.Finish(); !s.ok()) return s;
  if (absl::Status s = train.Finish(); !s.ok()) return s;

  result.val_tokens = val.tokens();
  result.train_tokens = train.tokens();
  result.val_counted_tokens = val.counted();
  result.train_counted_tokens = train.counted();
  result.shards = val.shards();
  result.shards.insert(result.shards.end(), train.shards().begin(), train.shards().end());
  std::set<std::string> keep;
  for (const PreparedShard& s : result.shards) {
    keep.insert(s.file);
    if (!s.mask_file.empty()) keep.insert(s.mask_file);
  }
  if (absl::Status s = RemoveStaleShards(output_dir, options.name, keep); !s.ok()) return s;

  result.manifest_path = absl::StrCat(output_dir, "/manifest.json");
  const std::string manifest = ManifestText(options, *tokenizer_sha256, *tok, *eot, width, *files, *docs, result);
  if (absl::Status s = WriteFileAtomically(result.manifest_path, manifest); !s.ok()) return s;
  return result;
}

absl::Status CheckManifestMatches(const std::string& manifest_path, const PrepareOptions& options) {
  absl::StatusOr<std::string> text = ReadFileToString(manifest_path);
  if (!text.ok()) return text.status();
  const nlohmann::json m = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object()) return absl::DataLossError(absl::StrCat(manifest_path, ": not a JSON object"));
  const nlohmann::json none;
  const nlohmann::json& opts = m.contains("options") ? m["options"] : none;
  const nlohmann::json& tok = m.contains("tokenizer") ? m["tokenizer"] : none;
  auto field = [](const nlohmann::json& j, const char* key, nlohmann::json fallback) {
    return j.is_object() && j.contains(key) ? j[key] : fallback;
  };
  // What this request would record, against what the folder holds. Manifests
  // from before chat data have no format: text.
  const std::pair<std::string, std::pair<nlohmann::json, nlohmann::json>> fields[] = {
      {"inputs", {field(m, "inputs", none), nlohmann::json(options.inputs)}},
      {"format", {field(opts, "format", "text"), nlohmann::json(DataFormatName(options.format))}},
      {"split", {field(opts, "split", none), nlohmann::json(DocumentSplitName(options.split))}},
      {"val_fraction", {field(opts, "val_fraction", none), nlohmann::json(options.val_fraction)}},
      {"chat_template",
       {field(opts, "chat_template", none),
        options.chat_template ? nlohmann::json(ChatTemplateName(*options.chat_template)) : field(opts, "chat_template", none)}},
  };
  auto differs = [&](const std::string& name, const nlohmann::json& was, const nlohmann::json& now) {
    return absl::AlreadyExistsError(absl::StrCat(
        manifest_path, " says its shards were prepared with ", name, " ", was.dump(), ", not ", now.dump(),
        ": remove the folder to prepare them again, or give this data another output"));
  };
  for (const auto& [name, values] : fields) {
    // A field an older manifest does not record is not held against it.
    if (!values.first.is_null() && values.first != values.second) return differs(name, values.first, values.second);
  }
  // The tokenizer: the same path, or a file with the same contents (a folder moved).
  const nlohmann::json was = field(tok, "path", none);
  if (!was.is_null() && was != nlohmann::json(options.tokenizer_path)) {
    const std::string path = ExpandHome(options.tokenizer_path);
    const std::string file = TokenizerFileIn(path).value_or(path);
    absl::StatusOr<std::string> sha = Sha256OfFile(file);
    if (!sha.ok() || nlohmann::json(*sha) != field(tok, "sha256", none)) {
      return differs("tokenizer", was, options.tokenizer_path);
    }
  }
  return absl::OkStatus();
}

std::optional<int64_t> ManifestVocabSize(const std::string& manifest_path) {
  absl::StatusOr<std::string> text = ReadFileToString(manifest_path);
  if (!text.ok()) return std::nullopt;
  const nlohmann::json m = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("tokenizer") || !m["tokenizer"].is_object()) return std::nullopt;
  const nlohmann::json vocab = m["tokenizer"].value("vocab_size", nlohmann::json());
  if (!vocab.is_number_integer()) return std::nullopt;
  return vocab.get<int64_t>();
}

}  // namespace colossal::io
