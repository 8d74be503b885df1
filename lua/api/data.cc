// colossal.data: token datasets.
//
//   local paths = colossal.data.prepare{ input = colossal.data.default_corpus(),
//                                        output = "data/shakespeare", name = "shakespeare" }
//   -- paths.train = "data/shakespeare/shakespeare_train_*.bin", paths.val = ...
//   local loader = colossal.data.loader{ pattern = paths.train, batch_size = 8, seq_len = 1024 }
//   local batch = loader:next()        -- inputs/targets [8, 1024]; this rank's rows
//   -- packing = false: one document (conversation) a row, padded; chat shards only
//   -- document_attention = true: packed rows of chat shards carry each token's
//   -- position in its conversation, and the model attends within each (Llama family)
//   -- batch:counted(): its targets the loss counts (loader:has_loss_masks())
//
// A loader hands each process of the job its own rows of every global batch
// (rank and world size from the launcher: io/loader/data_loader.h).
// prepare() is idempotent: an output folder with a manifest.json is taken as
// prepared (delete it to redo); with several processes rank 0 prepares and
// the others wait for its manifest.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "io/prepare/prepare.h"
#include "lua/api/generation.h"
#include "lua/api/lua_util.h"
#include "lua/api/objects.h"

namespace colossal::lua {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string DataDir() {
  if (const char* d = std::getenv("COLOSSAL_DATA"); d != nullptr && *d != '\0') return d;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home ? home : "", "/.cache/colossal/data");
}

// colossal.data.loader{pattern, batch_size, seq_len, shuffle, seed, prefetch, vocab_size, packing,
// document_attention} -> DataLoader
int MakeLoader(lua_State* L) {
  OptionTable o(L, 1, "colossal.data.loader");
  std::shared_ptr<Runtime> rt = GetRuntime(L);
  auto loader = std::make_shared<Loader>();
  io::DataLoaderOptions& options = loader->options;
  options.pattern = o.string("pattern", "");
  options.batch_size = o.integer("batch_size", 0);
  options.seq_len = o.integer("seq_len", 0);
  options.shuffle = o.boolean("shuffle", true);
  options.seed = static_cast<uint64_t>(o.integer("seed", static_cast<int64_t>(rt->seed)));
  options.prefetch_depth = o.int32("prefetch", 2);
  options.vocab_size = o.integer("vocab_size", 0);  // the model's: ids past it are refused
  options.pack = o.boolean("packing", true);         // false: one document a row (chat shards)
  // Packed rows of chat shards: each document attends to itself only.
  options.document_positions = o.boolean("document_attention", false);
  o.finish();
  if (options.pattern.empty()) o.fail("pattern", "is required (a glob of token shards)");
  if (options.batch_size <= 0) o.fail("batch_size", "must be a positive integer");
  if (options.seq_len <= 0) o.fail("seq_len", "must be a positive integer");
  if (options.vocab_size < 0) o.fail("vocab_size", "must be >= 0 (0: unchecked)");
  options.rank = rt->rank.rank;
  options.world_size = rt->rank.world_size;
  options.device = rt->device;
  absl::StatusOr<std::unique_ptr<io::DataLoader>> opened = io::DataLoader::Open(options);
  if (absl::IsFailedPrecondition(opened.status()) &&
      absl::StrContains(opened.status().message(), "fewer than one global batch")) {
    // Too little data for the batch: the recipe's batch size (or world size), not the machine.
    RaiseError(L, absl::StrCat("colossal.data.loader: ", opened.status().message()), kErrorUsage);
  }
  ThrowIfError(L, "colossal.data.loader", opened.status());
  loader->loader = *std::move(opened);
  PushHandle(L, std::move(loader));
  return 1;
}

int Next(lua_State* L) {
  std::shared_ptr<Loader> loader = CheckHandle<Loader>(L, 1);
  absl::StatusOr<io::Batch> b = loader->loader->next_batch();
  ThrowIfError(L, "loader:next", b.status());
  auto batch = std::make_shared<Batch>();
  batch->batch = *std::move(b);
  PushHandle(L, std::move(batch));
  return 1;
}

int BatchesPerEpoch(lua_State* L) {
  lua_pushinteger(L, CheckHandle<Loader>(L, 1)->loader->batches_per_epoch());
  return 1;
}

// loader:has_loss_masks() -> whether the shards have loss masks (targets may
// be ignored: a step then weights its micro-batches by batch:counted()).
int HasLossMasks(lua_State* L) {
  lua_pushboolean(L, CheckHandle<Loader>(L, 1)->loader->has_loss_masks());
  return 1;
}

// loader:state() -> {epoch, batch}
int State(lua_State* L) {
  const io::DataLoaderState s = CheckHandle<Loader>(L, 1)->loader->state();
  PushNumberTable(L, {{"epoch", static_cast<double>(s.epoch)},
                      {"batch", static_cast<double>(s.batch)}});
  return 1;
}

// colossal.data.prepare{input, output, name, val_fraction, tokenizer, split, format,
// chat_template} -> {train, val, prepared_now, vocab_size (the tokenizer's, from the manifest)}
// split: "file" (each file is a document, the default), "paragraph" (each
// blank-line-separated paragraph is one: one long text can then give a val
// split) or "line". format: "text" (the default) or "chat" (JSON Lines
// conversations, split by line, with loss masks: io/prepare/prepare.h);
// chat_template: llama3, llama3.1, chatml, qwen2 or qwen2.5 (default: the tokenizer folder's).
int Prepare(lua_State* L) {
  OptionTable o(L, 1, "colossal.data.prepare");
  io::PrepareOptions options;
  const std::string input = o.string("input", "");
  options.output_dir = o.string("output", "");
  options.name = o.string("name", "data");
  options.val_fraction = o.number("val_fraction", options.val_fraction);
  const bool default_tokenizer = !o.has("tokenizer");
  options.tokenizer_path = o.string("tokenizer", DefaultTokenizerPath());
  const std::string format = o.string("format", "text");
  if (std::optional<io::DataFormat> f = io::DataFormatFromName(format)) {
    options.format = *f;
  } else {
    o.fail("format", absl::StrCat("must be \"text\" or \"chat\", got \"", format, "\""));
  }
  const bool chat = options.format == io::DataFormat::kChat;
  if (o.has("chat_template")) {
    const std::string name = o.string("chat_template", "");
    if (!chat) o.fail("chat_template", "goes with format = \"chat\"");
    options.chat_template = io::ChatTemplateFromName(name);
    if (!options.chat_template) {
      o.fail("chat_template", absl::StrCat("must be one of ", io::ChatTemplateNames(), ", got \"", name, "\""));
    }
  }
  const std::string split = o.string("split", chat ? "line" : "file");
  if (std::optional<io::DocumentSplit> s = io::DocumentSplitFromName(split)) {
    options.split = *s;
  } else {
    o.fail("split", absl::StrCat("must be \"file\", \"paragraph\" or \"line\", got \"", split, "\""));
  }
  o.finish();
  if (input.empty()) o.fail("input", "is required (text files, folders or glob patterns)");
  if (options.output_dir.empty()) o.fail("output", "is required (the folder for the shards)");
  options.inputs = {input};
  std::shared_ptr<Runtime> rt = GetRuntime(L);
  const std::string manifest = absl::StrCat(options.output_dir, "/manifest.json");
  bool prepared_now = false;
  if (Exists(manifest)) {
    // Shards of other inputs (or another tokenizer, format, ...) under the
    // same folder would be trained on as if they were these.
    ThrowIfError(L, "colossal.data.prepare", io::CheckManifestMatches(manifest, options));
  } else {
    if (rt->rank.rank == 0) {
      // A machine without the default tokenizer: said as `data prepare` says it.
      if (default_tokenizer) ThrowIfError(L, "colossal.data.prepare", DefaultTokenizerInstalled());
      absl::StatusOr<io::PrepareResult> result = io::PrepareDataset(options);
      ThrowIfError(L, "colossal.data.prepare", result.status());
      prepared_now = true;
    } else {
      for (int waited = 0; !Exists(manifest); ++waited) {
        if (waited > 30 * 60 * 10) {
          RaiseError(L, absl::StrCat("colossal.data.prepare: rank 0 did not write ", manifest,
                                     " within 30 minutes"),
                     kErrorRuntime);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  lua_createtable(L, 0, 4);
  // The tokenizer's vocabulary (absent in an unreadable or older manifest):
  // a recipe compares it with the model's before step 1.
  if (std::optional<int64_t> vocab = io::ManifestVocabSize(manifest)) {
    lua_pushinteger(L, *vocab);
    lua_setfield(L, -2, "vocab_size");
  }
  const std::string prefix = absl::StrCat(options.output_dir, "/", options.name);
  lua_pushstring(L, absl::StrCat(prefix, "_train_*.bin").c_str());
  lua_setfield(L, -2, "train");
  lua_pushstring(L, absl::StrCat(prefix, "_val_*.bin").c_str());
  lua_setfield(L, -2, "val");
  lua_pushboolean(L, prepared_now);
  lua_setfield(L, -2, "prepared_now");
  return 1;
}

// colossal.data.default_corpus() -> the Shakespeare folder (tools/data/fetch_default_corpus.sh)
int DefaultCorpus(lua_State* L) {
  const std::string dir = absl::StrCat(DataDir(), "/corpus/shakespeare");
  if (!Exists(absl::StrCat(dir, "/SHA256SUMS"))) {
    // Name the variable when it chose the folder: a typo there reads as a
    // missing download otherwise.
    const char* env = std::getenv("COLOSSAL_DATA");
    const std::string from =
        env != nullptr && *env != '\0' ? absl::StrCat(" ($COLOSSAL_DATA is '", env, "')") : "";
    RaiseError(L,
               absl::StrCat("colossal.data.default_corpus: no corpus at ", dir, from,
                            "; tools/data/fetch_default_corpus.sh installs it (./colossal runs it "
                            "on first use)"),
               kErrorRuntime);
  }
  lua_pushstring(L, dir.c_str());
  return 1;
}

}  // namespace

int OpenData(lua_State* L) {
  static const luaL_Reg kLoaderMethods[] = {{"next", Protected<Next>},
                                            {"batches_per_epoch", Protected<BatchesPerEpoch>},
                                            {"state", Protected<State>},
                                            {"has_loss_masks", Protected<HasLossMasks>},
                                            {nullptr, nullptr}};
  RegisterType<Loader>(L, kLoaderMethods);
  static const luaL_Reg kFunctions[] = {{"loader", Protected<MakeLoader>},
                                        {"prepare", Protected<Prepare>},
                                        {"default_corpus", Protected<DefaultCorpus>},
                                        {nullptr, nullptr}};
  luaL_newlib(L, kFunctions);
  return 1;
}

}  // namespace colossal::lua
