// colossal::io — the data loader: batches of token windows from llm.c shards.
//
// A DataLoader reads every shard that a glob pattern matches (TokenShard,
// memory-mapped) and hands out batches of B rows of T+1 consecutive tokens,
// split into inputs [B, T] and targets [B, T] (the same row shifted by one),
// as int32 host tensors (core::Tensor):
//
//   colossal::io::DataLoaderOptions options;
//   options.pattern = "data/fineweb_train_*.bin";
//   options.batch_size = 8;            // B
//   options.seq_len = 1024;            // T
//   options.rank = rank;               // data-parallel rank and world size
//   options.world_size = world;
//   options.seed = 1337;
//   absl::StatusOr<std::unique_ptr<colossal::io::DataLoader>> loader =
//       colossal::io::DataLoader::Open(options);
//   if (!loader.ok()) return loader.status();   // no shard matched, a short shard, ...
//   absl::StatusOr<colossal::io::Batch> batch = (*loader)->next_batch();
//   // batch->inputs, batch->targets: int32 [8, 1024] on the CPU
//   colossal::io::DataLoaderState state = (*loader)->state();  // save with the checkpoint
//   nlohmann::json j = colossal::io::DataLoaderStateToJson(state);
//   ... later, in a new process ...
//   absl::Status s = (*loader)->set_state(state);  // the exact same remaining batches
//
// Windows. A shard of N tokens holds floor((N - 1) / T) windows; window w
// is tokens [w·T, w·T + T + 1) (consecutive windows share one token, as in
// llm.c). A shard with fewer than T + 1 tokens is an error (it holds no
// window), as is a pattern that matches nothing.
//
// Order (shuffle = true, the default). Each epoch shuffles the order of the
// shards, then the order of the windows inside each shard, both with
// Fisher-Yates driven by SplitMix64 seeded from (seed, epoch[, shard]): the
// order is the same on every platform and compiler. Shards are read one
// after another, so only one shard's permutation (4 bytes a window) is held.
// With shuffle = false windows come in file order (shards sorted by path).
//
// Ranks. The epoch's sequence of windows is cut into global batches of
// world_size·B windows; rank r takes rows [r·B, (r+1)·B) of each, so ranks
// get disjoint windows and stay in step. Windows left over after the last
// whole global batch are not used that epoch (they come in another order the
// next epoch). batches_per_epoch() = floor(windows / (world_size·B)), the same
// on every rank; when the epoch is exhausted the loader moves to the next one.
//
// State. DataLoaderState {epoch, batch, window}: the next batch to hand out,
// and how many windows of the epoch's order were handed out before it (over
// all ranks). state() after k next_batch() calls, restored with set_state()
// into a loader opened with the same options and shards, gives exactly the
// batches k, k+1, ... A loader with another world_size or batch_size (a job
// resumed on another number of processes) resumes at the same window: the
// rest of that epoch is cut into its own global batches, so no window is
// seen twice or skipped before the epoch's leftover. The state also records
// seed, seq_len and num_windows; set_state() checks them and says which
// differs.
//
// Loss masks. When the shards have loss masks beside them (a .mask file per
// .bin, io/shards/loss_mask.h: `data prepare --format chat` writes them), a
// target whose token the mask does not count is ignore_index in the batch
// (the inputs are unchanged): the loss skips it. Either every shard has a
// mask or none does (FailedPrecondition naming the first shard without one),
// and a mask holds as many tokens as its shard.
//
// Documents (pack = false). Each row is one document from its start: its
// first T + 1 tokens, or all of a shorter one followed by inputs 0 whose
// targets are ignore_index, so no row attends across documents (Colossal-AI's
// SFT pads each sample the same way). Documents start where the loss masks
// say (loss_mask.h: kDocumentStart); one may continue into the next shard (in
// path order). The "windows" above are then the documents, each counted in
// the shard it starts in: the order, the ranks and the state work alike.
//
// Prefetch. With prefetch_depth > 0 a thread prepares up to that many batches
// ahead. Batches live in host memory from core's pinned host allocator when
// `device` is a CUDA device (so host->device copies are asynchronous), plain
// host memory otherwise. A batch's memory is reused for a later batch only
// once every Tensor viewing it is gone, so returned tensors stay valid as long
// as the caller keeps them. prefetch_depth = 0 prepares each batch in
// next_batch(); both give the same batches.
//
// Thread-safety: one DataLoader is used from one thread (its own prefetch
// thread aside).
#ifndef COLOSSAL_IO_LOADER_DATA_LOADER_H_
#define COLOSSAL_IO_LOADER_DATA_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/alloc/allocator.h"
#include "core/device/device.h"
#include "core/tensor/tensor.h"
#include "io/shards/loss_mask.h"
#include "io/shards/token_shard.h"
#include "nlohmann/json.hpp"

namespace colossal::io {

struct DataLoaderOptions {
  // A glob(3) pattern ("data/train_*.bin"); matches are sorted by path.
  std::string pattern;
  int64_t batch_size = 0;  // B, > 0
  int64_t seq_len = 0;     // T, > 0
  int rank = 0;            // 0 <= rank < world_size
  int world_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  // Batches prepared ahead by a background thread; 0: none (no thread).
  int prefetch_depth = 2;
  // Where the batches will be used: a CUDA device makes the loader use
  // pinned host memory (and fail if none can be had); the CPU plain memory.
  core::Device device = core::Device::cpu();
  // > 0: the model's vocabulary. A batch holding a token id outside
  // [0, vocab_size) fails (InvalidArgument naming the id, the shard and the
  // position) instead of reaching the embedding, which on a GPU cannot stop
  // the run there. Shards made with another tokenizer are the usual cause.
  int64_t vocab_size = 0;
  // The target a loss mask's 0 becomes (the loss's ignore_index).
  int32_t ignore_index = -100;
  // true: rows are windows of the shards (above). false: each row is one
  // document (see "Documents"); needs shards with loss masks.
  bool pack = true;
  // With pack and shards with loss masks, batches carry `positions`: each
  // input token's position in its document (0 at the row's first token and
  // at every document start), so a model can attend within each document
  // (nn/layers/documents.h). Ignored otherwise.
  bool document_positions = false;
};

// Where a loader is: the next batch this rank hands out is batch `batch` of
// epoch `epoch`, which starts at window `window` of the epoch's order. The
// other fields identify the data order it belongs to.
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t batch = 0;
  int64_t window = 0;
  uint64_t seed = 0;
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  int world_size = 1;
  int64_t num_windows = 0;
  friend bool operator==(const DataLoaderState&, const DataLoaderState&) = default;
};

// {"epoch": 3, "batch": 120, "window": 3840, "seed": 1337, "batch_size": 8,
//  "seq_len": 1024, "world_size": 4, "num_windows": 9765}. "window" may be
// absent (states saved before it existed): batch * world_size * batch_size.
nlohmann::json DataLoaderStateToJson(const DataLoaderState& state);
// InvalidArgument naming the missing, mistyped or out-of-range key: epoch,
// batch, window and num_windows >= 0, batch_size and seq_len >= 1,
// world_size in [1, INT_MAX], seed any uint64_t.
absl::StatusOr<DataLoaderState> DataLoaderStateFromJson(const nlohmann::json& json);

// One batch: inputs and targets, int32 [B, T] on the host (views of one
// allocation). epoch and batch say which batch it is; counted is how many
// targets are not ignore_index (B * T without loss masks): the loss's
// denominator, which weights the batch in a step of several (a step's loss is
// the mean over every target it counts).
struct Batch {
  core::Tensor inputs;
  core::Tensor targets;
  core::Tensor positions;  // int32 [B, T] (DataLoaderOptions::document_positions), else empty
  int64_t counted = 0;
  int64_t epoch = 0;
  int64_t batch = 0;
};

class DataLoader {
 public:
  // Opens the shards and checks the options. Errors: InvalidArgument for bad
  // options or no file matching the pattern; the shard's own error for a
  // file that is not a valid shard; InvalidArgument naming the shard for one
  // shorter than T + 1 tokens; FailedPrecondition when there are fewer
  // windows than one global batch (world_size·B) or no pinned memory for a
  // CUDA device.
  static absl::StatusOr<std::unique_ptr<DataLoader>> Open(const DataLoaderOptions& options);

  ~DataLoader();  // stops the prefetch thread
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch of this rank; after the last batch of an epoch the first
  // of the next. Errors only from memory allocation.
  absl::StatusOr<Batch> next_batch();

  // The state to save: the next batch next_batch() will return.
  DataLoaderState state() const;
  // Moves to `state` (dropping prefetched batches), under this loader's
  // world_size and batch_size (see "State"). FailedPrecondition naming the
  // field when it was saved with another seed, seq_len or other data;
  // InvalidArgument for a negative epoch or a window outside the epoch.
  absl::Status set_state(const DataLoaderState& state);

  int64_t num_windows() const { return total_windows_; }
  // Batches in a whole epoch (the epoch a state resumed in may have fewer).
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const std::vector<std::string>& shard_paths() const { return paths_; }
  // Whether the shards have loss masks (targets may be ignore_index).
  bool has_loss_masks() const { return !masks_.empty(); }
  // Whether batches carry document positions (see document_positions).
  bool positions() const { return options_.document_positions && options_.pack && has_loss_masks(); }

  // (shard index, window index in the shard) of row `row` of batch `batch`
  // of epoch `epoch` for this rank: the order described above, for tests and tools.
  std::pair<int64_t, int64_t> WindowAt(int64_t epoch, int64_t batch, int64_t row);

 private:
  DataLoader(DataLoaderOptions options, std::vector<std::string> paths, std::vector<TokenShard> shards,
             std::vector<LossMask> masks, std::shared_ptr<core::Allocator> allocator);

  // Position of a window within an epoch's order.
  struct Cursor {
    int64_t epoch = -1;
    std::vector<int64_t> shard_order;      // shard at each position
    std::vector<int64_t> order_start;      // first global window of each position, + total
    int64_t cached_position = -1;          // position whose permutation is in `perm`
    std::vector<uint32_t> perm;
  };
  std::pair<int64_t, int64_t> Locate(Cursor& cursor, int64_t epoch, int64_t g);
  // The window epoch `epoch`'s batch 0 starts at (non-zero only in the epoch
  // a state resumed in), and that epoch's number of batches.
  int64_t first_window(int64_t epoch) const { return epoch == base_epoch_ ? base_window_ : 0; }
  int64_t batches_in(int64_t epoch) const;
  absl::StatusOr<Batch> MakeBatch(Cursor& cursor, int64_t epoch, int64_t batch);
  // A document's first tokens (at most `max`) from token `offset` of `shard`,
  // with their mask flags; returns how many (it ends at the next document start).
  int64_t ReadDocument(int64_t shard, int64_t offset, int64_t max, int32_t* tokens, uint8_t* flags) const;
  absl::StatusOr<std::shared_ptr<core::Storage>> AcquireStorage();
  void StartPrefetch();
  void StopPrefetch();
  void PrefetchLoop();

  const DataLoaderOptions options_;
  const std::vector<std::string> paths_;
  const std::vector<TokenShard> shards_;
  const std::vector<LossMask> masks_;  // one per shard, or none
  std::vector<int64_t> shard_windows_;
  std::vector<std::vector<int64_t>> doc_starts_;  // pack = false: each shard's document starts
  int64_t total_windows_ = 0;
  int64_t batches_per_epoch_ = 0;
  std::shared_ptr<core::Allocator> allocator_;

  // Consumer side: the next batch to hand out.
  int64_t epoch_ = 0;
  int64_t batch_ = 0;
  // Set by set_state (the prefetch thread stopped): epoch base_epoch_ starts
  // at window base_window_.
  int64_t base_epoch_ = -1;
  int64_t base_window_ = 0;
  Cursor sync_cursor_;  // used without prefetch, and by WindowAt

  // Memory for batches: reused when no Tensor views it any more.
  std::mutex pool_mu_;
  std::vector<std::shared_ptr<core::Storage>> pool_;

  // Prefetch thread and its queue of ready batches, in order.
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<absl::StatusOr<Batch>> ready_;
  bool stop_ = false;
  int64_t produce_epoch_ = 0;  // the next batch the thread prepares
  int64_t produce_batch_ = 0;
};

}  // namespace colossal::io

#endif  // COLOSSAL_IO_LOADER_DATA_LOADER_H_
