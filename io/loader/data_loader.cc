#include "io/loader/data_loader.h"

#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc/default_allocator.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"
#include "io/common/json_util.h"

namespace colossal::io {
namespace {

// SplitMix64: a small, well-mixed generator whose output is fixed by its
// definition (std::shuffle's is not: distributions differ between libraries).
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t s = seed;
  s ^= SplitMix64(s) + a * 0xD1B54A32D192ED03ULL;
  s ^= SplitMix64(s) + b * 0xABC98388FB8FAC03ULL;
  return s;
}

// A uniform integer in [0, n) (n > 0), by rejection: no modulo bias.
uint64_t UniformBelow(uint64_t& state, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = SplitMix64(state);
  } while (x >= limit);
  return x % n;
}

template <typename T>
void Shuffle(std::vector<T>& v, uint64_t state) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(UniformBelow(state, i));
    std::swap(v[i - 1], v[j]);
  }
}

absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) {
  glob_t g;
  std::memset(&g, 0, sizeof(g));
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (rc == GLOB_NOSPACE) return absl::ResourceExhaustedError(absl::StrCat("data loader: out of memory matching '", pattern, "'"));
  if (rc == GLOB_ABORTED) return absl::PermissionDeniedError(absl::StrCat("data loader: cannot read a folder of pattern '", pattern, "'"));
  if (rc == GLOB_NOMATCH || paths.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("data loader: no shards matched the pattern '", pattern,
                                                   "' (check the folder and the glob, e.g. 'data/train_*.bin')"));
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// The loss masks beside `shards` (loss_mask.h): one per shard, or none.
absl::StatusOr<std::vector<LossMask>> OpenLossMasks(const std::vector<std::string>& paths,
                                                    const std::vector<TokenShard>& shards) {
  std::vector<LossMask> masks;
  size_t first_without = paths.size();
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string path = LossMaskPathFor(paths[i]);
    if (::access(path.c_str(), F_OK) != 0) {
      first_without = std::min(first_without, i);
      continue;
    }
    absl::StatusOr<LossMask> mask = LossMask::Open(path);
    if (!mask.ok()) return mask.status();
    if (mask->num_tokens() != shards[i].num_tokens()) {
      return absl::DataLossError(absl::StrCat("data loader: loss mask '", path, "' holds ", mask->num_tokens(),
                                              " tokens, its shard '", paths[i], "' ", shards[i].num_tokens()));
    }
    masks.push_back(*std::move(mask));
  }
  if (!masks.empty() && first_without < paths.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data loader: shard '", paths[first_without], "' has no loss mask beside it (",
        LossMaskPathFor(paths[first_without]), ") but ", masks.front().path(),
        " is there: either every shard has one (chat data) or none does; prepare the data again"));
  }
  return masks;
}

}  // namespace

nlohmann::json DataLoaderStateToJson(const DataLoaderState& state) {
  return nlohmann::json{{"epoch", state.epoch},           {"batch", state.batch},
                        {"window", state.window},
                        {"seed", state.seed},             {"batch_size", state.batch_size},
                        {"seq_len", state.seq_len},       {"world_size", state.world_size},
                        {"num_windows", state.num_windows}};
}

namespace {

// Integer member `key` of a saved state, in [lo, hi]. A file edited by hand
// or written by a broken tool must not reach the loader: batch_size 0 or a
// world_size past int's range would be taken as given (set_state compares
// neither, since a resume may change them), so each field is checked here,
// naming it. InvalidArgument.
absl::StatusOr<int64_t> StateInt(const nlohmann::json& json, const char* key, int64_t lo, int64_t hi) {
  constexpr absl::string_view kWhat = "data loader state";
  absl::StatusOr<int64_t> v = JsonInt(json, key, kWhat);
  if (!v.ok() || (*v >= lo && *v <= hi)) return v;
  const std::string range = hi == INT64_MAX ? absl::StrCat(">= ", lo) : absl::StrCat("in [", lo, ", ", hi, "]");
  return absl::InvalidArgumentError(absl::StrCat(kWhat, ": '", key, "' must be an integer ", range, ", got ", *v));
}

}  // namespace

absl::StatusOr<DataLoaderState> DataLoaderStateFromJson(const nlohmann::json& json) {
  if (!json.is_object()) return absl::InvalidArgumentError("data loader state: expected a JSON object");
  DataLoaderState s;
  auto get = [&](const char* key, auto& out, int64_t lo, int64_t hi) -> absl::Status {
    absl::StatusOr<int64_t> v = StateInt(json, key, lo, hi);
    if (!v.ok()) return v.status();
    out = static_cast<std::remove_reference_t<decltype(out)>>(*v);
    return absl::OkStatus();
  };
  // The seed is any uint64_t (past INT64_MAX too).
  const auto seed = json.find("seed");
  if (seed == json.end() || !seed->is_number_integer() ||
      (!seed->is_number_unsigned() && seed->get<int64_t>() < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader state: 'seed' must be an integer >= 0, got ",
        seed == json.end() ? std::string("nothing") : seed->is_structured() ? seed->type_name() : seed->dump()));
  }
  s.seed = seed->get<uint64_t>();
  for (absl::Status st : {get("epoch", s.epoch, 0, INT64_MAX), get("batch", s.batch, 0, INT64_MAX),
                          get("batch_size", s.batch_size, 1, INT64_MAX), get("seq_len", s.seq_len, 1, INT64_MAX),
                          get("world_size", s.world_size, 1, INT_MAX),
                          get("num_windows", s.num_windows, 0, INT64_MAX)}) {
    if (!st.ok()) return st;
  }
  if (json.contains("window")) {
    absl::Status st = get("window", s.window, 0, INT64_MAX);
    if (!st.ok()) return st;
    return s;
  }
  // States saved before "window" existed: the batch's first window.
  if (__builtin_mul_overflow(s.batch, static_cast<int64_t>(s.world_size), &s.window) ||
      __builtin_mul_overflow(s.window, s.batch_size, &s.window)) {
    return absl::InvalidArgumentError(absl::StrCat("data loader state: 'batch' ", s.batch, " x world_size ",
                                                   s.world_size, " x batch_size ", s.batch_size,
                                                   " overflows (no \"window\" given)"));
  }
  return s;
}

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Open(const DataLoaderOptions& options) {
  if (options.batch_size <= 0 || options.seq_len <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("data loader: batch_size and seq_len must be positive, got ",
                                                   options.batch_size, " and ", options.seq_len));
  }
  if (options.world_size <= 0 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("data loader: rank ", options.rank, " is not in [0, world_size = ",
                                                   options.world_size, ")"));
  }
  if (options.vocab_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("data loader: vocab_size must be >= 0, got ", options.vocab_size));
  }
  if (options.prefetch_depth < 0) {
    return absl::InvalidArgumentError(absl::StrCat("data loader: prefetch_depth must be >= 0, got ", options.prefetch_depth));
  }
  absl::StatusOr<std::vector<std::string>> paths = Glob(options.pattern);
  if (!paths.ok()) return paths.status();
  std::vector<TokenShard> shards;
  shards.reserve(paths->size());
  for (const std::string& p : *paths) {
    absl::StatusOr<TokenShard> shard = TokenShard::Open(p);
    if (!shard.ok()) return shard.status();
    if (options.pack && shard->num_tokens() < options.seq_len + 1) {
      return absl::InvalidArgumentError(absl::StrCat("data loader: shard '", p, "' has ", shard->num_tokens(),
                                                     " tokens, fewer than one window of seq_len + 1 = ",
                                                     options.seq_len + 1));
    }
    shards.push_back(*std::move(shard));
  }
  absl::StatusOr<std::vector<LossMask>> masks = OpenLossMasks(*paths, shards);
  if (!masks.ok()) return masks.status();
  if (!options.pack && masks->empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data loader: one document a row (packing = false) needs to know where documents start: the shards "
        "matching '", options.pattern, "' have no loss masks beside them (chat data prepared with "
        "`data prepare --format chat` has)"));
  }
  std::shared_ptr<core::Allocator> allocator = core::cpu_allocator();
  if (options.device.is_cuda()) {
    absl::StatusOr<std::shared_ptr<core::Allocator>> pinned = core::pinned_host_allocator();
    if (!pinned.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("data loader: no pinned host memory for a CUDA device: ", pinned.status().message()));
    }
    allocator = *std::move(pinned);
  }
  std::unique_ptr<DataLoader> loader(
      new DataLoader(options, *std::move(paths), std::move(shards), *std::move(masks), std::move(allocator)));
  if (loader->batches_per_epoch_ == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data loader: the shards matching '", options.pattern, "' hold ", loader->total_windows_,
        options.pack ? absl::StrCat(" windows of ", options.seq_len + 1, " tokens") : std::string(" documents"),
        ", fewer than one global batch of world_size x batch_size = ",
        options.world_size * options.batch_size));
  }
  loader->StartPrefetch();
  return loader;
}

DataLoader::DataLoader(DataLoaderOptions options, std::vector<std::string> paths, std::vector<TokenShard> shards,
                       std::vector<LossMask> masks, std::shared_ptr<core::Allocator> allocator)
    : options_(std::move(options)), paths_(std::move(paths)), shards_(std::move(shards)),
      masks_(std::move(masks)), allocator_(std::move(allocator)) {
  for (size_t i = 0; i < shards_.size(); ++i) {
    int64_t w = (shards_[i].num_tokens() - 1) / options_.seq_len;
    if (!options_.pack) {
      // One row a document: the documents that start in this shard.
      std::vector<int64_t>& starts = doc_starts_.emplace_back();
      for (int64_t t = 0; t < masks_[i].num_tokens(); ++t) {
        if (masks_[i].starts_document(t)) starts.push_back(t);
      }
      w = static_cast<int64_t>(starts.size());
    }
    shard_windows_.push_back(w);
    total_windows_ += w;
  }
  batches_per_epoch_ = total_windows_ / (options_.batch_size * options_.world_size);
}

DataLoader::~DataLoader() { StopPrefetch(); }

std::pair<int64_t, int64_t> DataLoader::Locate(Cursor& c, int64_t epoch, int64_t g) {
  const int64_t n = static_cast<int64_t>(shards_.size());
  if (c.epoch != epoch) {
    c.epoch = epoch;
    c.shard_order.resize(n);
    for (int64_t i = 0; i < n; ++i) c.shard_order[i] = i;
    if (options_.shuffle) Shuffle(c.shard_order, MixSeed(options_.seed, static_cast<uint64_t>(epoch), ~uint64_t{0}));
    c.order_start.assign(n + 1, 0);
    for (int64_t i = 0; i < n; ++i) c.order_start[i + 1] = c.order_start[i] + shard_windows_[c.shard_order[i]];
    c.cached_position = -1;
  }
  const int64_t pos = std::upper_bound(c.order_start.begin(), c.order_start.end(), g) - c.order_start.begin() - 1;
  const int64_t shard = c.shard_order[pos];
  const int64_t local = g - c.order_start[pos];
  if (!options_.shuffle) return {shard, local};
  if (c.cached_position != pos) {
    c.perm.resize(shard_windows_[shard]);
    for (size_t i = 0; i < c.perm.size(); ++i) c.perm[i] = static_cast<uint32_t>(i);
    Shuffle(c.perm, MixSeed(options_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(shard)));
    c.cached_position = pos;
  }
  return {shard, c.perm[local]};
}

std::pair<int64_t, int64_t> DataLoader::WindowAt(int64_t epoch, int64_t batch, int64_t row) {
  const int64_t g =
      first_window(epoch) + (batch * options_.world_size + options_.rank) * options_.batch_size + row;
  return Locate(sync_cursor_, epoch, g);
}

absl::StatusOr<std::shared_ptr<core::Storage>> DataLoader::AcquireStorage() {
  // inputs, targets and, with document positions, positions.
  const size_t planes = positions() ? 3 : 2;
  const size_t bytes = planes * static_cast<size_t>(options_.batch_size * options_.seq_len) * sizeof(int32_t);
  std::lock_guard<std::mutex> lock(pool_mu_);
  for (const std::shared_ptr<core::Storage>& s : pool_) {
    if (s.use_count() == 1) {  // no Tensor views it any more
      // Order the consumer's last reads before our writes (use_count is a relaxed load).
      std::atomic_thread_fence(std::memory_order_acquire);
      return s;
    }
  }
  absl::StatusOr<std::shared_ptr<core::Storage>> s = core::Storage::allocate(allocator_, bytes, core::Stream::cpu());
  if (!s.ok()) return s.status();
  // Keep a few for reuse: the ring, one batch in the caller's hands, one being filled.
  if (pool_.size() < static_cast<size_t>(options_.prefetch_depth) + 2) pool_.push_back(*s);
  return s;
}

absl::StatusOr<Batch> DataLoader::MakeBatch(Cursor& cursor, int64_t epoch, int64_t batch) {
  absl::StatusOr<std::shared_ptr<core::Storage>> storage = AcquireStorage();
  if (!storage.ok()) return storage.status();
  const int64_t B = options_.batch_size, T = options_.seq_len;
  Batch out;
  out.epoch = epoch;
  out.batch = batch;
  absl::StatusOr<core::Tensor> inputs = core::Tensor::from_storage(*storage, 0, core::Shape({B, T}), core::DType::kI32);
  if (!inputs.ok()) return inputs.status();
  absl::StatusOr<core::Tensor> targets = core::Tensor::from_storage(
      *storage, static_cast<size_t>(B * T) * sizeof(int32_t), core::Shape({B, T}), core::DType::kI32);
  if (!targets.ok()) return targets.status();
  int32_t* in = inputs->data<int32_t>();
  int32_t* tg = targets->data<int32_t>();
  int32_t* pos = nullptr;
  if (positions()) {
    absl::StatusOr<core::Tensor> p = core::Tensor::from_storage(
        *storage, 2 * static_cast<size_t>(B * T) * sizeof(int32_t), core::Shape({B, T}), core::DType::kI32);
    if (!p.ok()) return p.status();
    out.positions = *std::move(p);
    pos = out.positions.data<int32_t>();
  }
  std::vector<int32_t> tokens(static_cast<size_t>(T + 1));
  std::vector<uint8_t> flags(static_cast<size_t>(T + 1), kCounted);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t g = first_window(epoch) + (batch * options_.world_size + options_.rank) * B + r;
    const auto [shard, window] = Locate(cursor, epoch, g);
    // The row's tokens, as int32 whatever the shard's width: a window's T + 1,
    // or a document's first (up to T + 1).
    int64_t n = T + 1, first = window * T;
    if (options_.pack) {
      shards_[shard].CopyTokens(first, n, tokens.data());
      if (!masks_.empty()) std::copy_n(masks_[shard].values().begin() + first, n, flags.begin());
    } else {
      first = doc_starts_[shard][window];
      n = ReadDocument(shard, first, T + 1, tokens.data(), flags.data());
    }
    if (options_.vocab_size > 0) {
      for (int64_t i = 0; i < n; ++i) {
        const int32_t id = tokens[i];
        if (id < 0 || id >= options_.vocab_size) {
          return absl::InvalidArgumentError(absl::StrCat(
              "data loader: token id ", static_cast<uint32_t>(id),  // as the shard holds it
              " at token ", first + i, " of shard '", shards_[shard].path(),
              options_.pack ? "'" : "' (or a later one, where the document continues)",
              " is outside the model's vocabulary [0, ",
              options_.vocab_size,
              "): the shard was made with another tokenizer (prepare it with the model's, or give "
              "the model a vocabulary that holds it)"));
        }
      }
    }
    // Input t is token t, target t token t + 1 unless the mask does not count
    // it; past a short document's end, inputs are 0 and targets ignored (the
    // causal model's real positions never see them).
    for (int64_t t = 0; t < T; ++t) {
      const bool counted = t + 1 < n && (flags[t + 1] & kCounted) != 0;
      in[r * T + t] = t < n ? tokens[t] : 0;
      tg[r * T + t] = counted ? tokens[t + 1] : options_.ignore_index;
      out.counted += counted ? 1 : 0;
      // A document starts at the row's first token and at each flagged one.
      if (pos != nullptr) pos[r * T + t] = t == 0 || (flags[t] & kDocumentStart) != 0 ? 0 : pos[r * T + t - 1] + 1;
    }
  }
  out.inputs = *std::move(inputs);
  out.targets = *std::move(targets);
  return out;
}

int64_t DataLoader::ReadDocument(int64_t shard, int64_t offset, int64_t max, int32_t* tokens,
                                 uint8_t* flags) const {
  int64_t n = 0, s = shard, p = offset;
  while (n < max) {
    while (p == shards_[s].num_tokens()) {  // the document continues in the next shard (path order)
      if (++s == static_cast<int64_t>(shards_.size())) return n;
      p = 0;
    }
    if (n > 0 && masks_[s].starts_document(p)) break;
    tokens[n] = shards_[s].token(p);
    flags[n] = masks_[s].values()[p];
    ++n;
    ++p;
  }
  return n;
}

void DataLoader::StartPrefetch() {
  if (options_.prefetch_depth == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
    ready_.clear();
    produce_epoch_ = epoch_;
    produce_batch_ = batch_;
  }
  thread_ = std::thread([this] { PrefetchLoop(); });
}

void DataLoader::StopPrefetch() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  ready_.clear();
}

void DataLoader::PrefetchLoop() {
  Cursor cursor;
  for (;;) {
    int64_t epoch, batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || ready_.size() < static_cast<size_t>(options_.prefetch_depth); });
      if (stop_) return;
      epoch = produce_epoch_;
      batch = produce_batch_;
      if (++produce_batch_ >= batches_in(produce_epoch_)) {
        produce_batch_ = 0;
        ++produce_epoch_;
      }
    }
    absl::StatusOr<Batch> b = MakeBatch(cursor, epoch, batch);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      ready_.push_back(std::move(b));
    }
    cv_.notify_all();
  }
}

absl::StatusOr<Batch> DataLoader::next_batch() {
  absl::StatusOr<Batch> b;
  if (options_.prefetch_depth == 0) {
    b = MakeBatch(sync_cursor_, epoch_, batch_);
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty(); });
    b = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    cv_.notify_all();
  }
  if (!b.ok()) {
    // Try the same batch again next time.
    StopPrefetch();
    StartPrefetch();
    return b.status();
  }
  if (++batch_ >= batches_in(epoch_)) {
    batch_ = 0;
    ++epoch_;
  }
  return b;
}

DataLoaderState DataLoader::state() const {
  DataLoaderState s;
  s.epoch = epoch_;
  s.batch = batch_;
  s.window = first_window(epoch_) + batch_ * options_.world_size * options_.batch_size;
  s.seed = options_.seed;
  s.batch_size = options_.batch_size;
  s.seq_len = options_.seq_len;
  s.world_size = options_.world_size;
  s.num_windows = total_windows_;
  return s;
}

int64_t DataLoader::batches_in(int64_t epoch) const {
  return (total_windows_ - first_window(epoch)) / (options_.batch_size * options_.world_size);
}

absl::Status DataLoader::set_state(const DataLoaderState& s) {
  const DataLoaderState mine = state();
  auto differs = [](const char* what, auto saved, auto now) {
    return absl::FailedPreconditionError(absl::StrCat("data loader state was saved with ", what, " = ", saved,
                                                      ", this loader has ", what, " = ", now,
                                                      ": resuming would not give the same batches"));
  };
  if (s.seed != mine.seed) return differs("seed", s.seed, mine.seed);
  if (s.seq_len != mine.seq_len) return differs("seq_len", s.seq_len, mine.seq_len);
  if (s.num_windows != mine.num_windows) return differs("num_windows (the shards, or packing, changed?)", s.num_windows, mine.num_windows);
  if (s.epoch < 0 || s.window < 0 || s.window > total_windows_) {
    return absl::InvalidArgumentError(absl::StrCat("data loader state: epoch ", s.epoch, ", window ", s.window,
                                                   " is outside [0, ", total_windows_, "] windows per epoch"));
  }
  StopPrefetch();
  // Batch 0 of the resumed epoch starts at the saved window; with the saving
  // loader's world_size and batch_size that is exactly its next batch.
  base_epoch_ = s.epoch;
  base_window_ = s.window;
  epoch_ = s.epoch;
  batch_ = 0;
  if (batches_in(epoch_) == 0) ++epoch_;  // only the epoch's leftover remained
  StartPrefetch();
  return absl::OkStatus();
}

}  // namespace colossal::io
