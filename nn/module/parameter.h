// colossal::nn — parameters: one table per model, flat buffers, named views.
//
// A model's parameters are listed once, in a ParameterTable: a name (Hugging
// Face spelling for GPT-2, e.g. "transformer.h.0.attn.c_attn.weight"), a shape,
// a dtype, an initialisation rule and the element offset of the parameter
// inside the flat buffer of its dtype. The table is the single source of
// truth and costs no parameter memory: a model is *declared* (its table, its
// modules' handles bound to a ParameterStore with no memory), and whoever
// trains it *materializes* the store: ParameterStore::allocate gives every
// parameter its place in one flat value buffer and one flat gradient buffer
// per dtype on one device (the layout of one process holding the whole model:
// ddp and ZeRO), and initialize() draws the initial values. All-reduce, ZeRO
// sharding, checkpoint I/O and optimizers work on contiguous ranges
// (flat_values / flat_grads) while layers work on the views.
//
// Offsets are rounded up so every view starts 16-byte aligned (CUDA vector
// loads); the few padding elements between views are zero in both buffers and
// belong to no parameter.
//
// Modules do not own parameters: each module declares its entries into the
// model's table (Module::declare) and takes a ParameterHandle per entry from
// the store (Module::bind). A handle reads the store's current view at each
// use, so the memory behind it may be allocated after binding, moved between
// host and device, freed between uses or replaced (the parallel plugins'
// job); a handle read while its parameter has no memory is an error that names
// the parameter.
//
//   ParameterTable table;
//   COLOSSAL_RETURN_IF_ERROR(table.add("fc.weight", {4, 3}, DType::kF32, InitRule::normal(0.02)));
//   COLOSSAL_RETURN_IF_ERROR(table.add("fc.bias", {3}, DType::kF32));           // zeros
//   ParameterStore store = ParameterStore::declare(table);   // no memory yet
//   COLOSSAL_ASSIGN_OR_RETURN(ParameterHandle w, store.handle("fc.weight"));
//   COLOSSAL_RETURN_IF_ERROR(store.allocate(Stream::cpu()));   // w.value() works from here on
//   COLOSSAL_RETURN_IF_ERROR(store.initialize(/*seed=*/1337, Stream::cpu()));
//   COLOSSAL_ASSIGN_OR_RETURN(core::Tensor v, w.value());   // a view into flat_values(kF32)
//   COLOSSAL_RETURN_IF_ERROR(store.zero_grad(Stream::cpu()));
#ifndef COLOSSAL_NN_MODULE_PARAMETER_H_
#define COLOSSAL_NN_MODULE_PARAMETER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"

namespace colossal::nn {

// How a parameter's initial values are drawn (ParameterStore::initialize).
struct InitRule {
  enum class Kind { kZeros, kOnes, kNormal };
  Kind kind = Kind::kZeros;
  double std = 0.0;  // kNormal: N(0, std^2)
  // kNormal: the last `zero_tail` elements are zeros instead (padding rows,
  // e.g. GPT-2's wte rows past the real vocabulary).
  int64_t zero_tail = 0;

  static InitRule zeros() { return {}; }
  static InitRule ones() { return {Kind::kOnes, 0.0, 0}; }
  static InitRule normal(double std, int64_t zero_tail = 0) {
    return {Kind::kNormal, std, zero_tail};
  }
};

// The std of N(0, std^2) that layers declare their weight matrices with
// (GPT-2's and BERT's 0.02); a model changes it per parameter (set_init).
inline constexpr double kDefaultInitStd = 0.02;

// How a tensor-parallel rank's piece of a parameter is cut from the whole
// one (Megatron's column, row and vocabulary splits). dim < 0 or parts == 1:
// not split (every rank of the tensor-parallel group holds it whole).
// Otherwise dimension `dim` of the whole parameter is `blocks` equal blocks
// (GPT-2's fused q|k|v: 3), each cut into `parts` equal pieces, and this rank
// holds piece `index` of every block, concatenated in block order.
struct TensorSplit {
  int dim = -1;
  int blocks = 1;
  int parts = 1;
  int index = 0;
  bool active() const { return dim >= 0 && parts > 1; }
};

// One row of a ParameterTable.
struct ParameterEntry {
  std::string name;
  core::Shape shape;
  core::DType dtype = core::DType::kF32;
  // Element offset into the flat buffer of `dtype` (a multiple of 16 bytes).
  int64_t offset = 0;
  InitRule init;  // zero_tail counts elements of the whole (unsplit) parameter
  // Where the parameter's random values start in the Philox stream of the
  // seed: its offset in a float32 layout of the same entries (equal to
  // `offset` for float32). Element i of the parameter takes stream element
  // init_offset + i, so every dtype and every layout (replicated, sharded,
  // chunked) draws the same values.
  int64_t init_offset = 0;
  // Tensor parallelism: `shape` is this rank's piece of `global_shape`, cut
  // as `split` says; init_offset and init are the whole parameter's, so the
  // piece draws the values the whole parameter has there. Unsplit entries
  // have global_shape == shape.
  TensorSplit split;
  core::Shape global_shape;
  int64_t numel() const { return shape.numel(); }
};

// The contiguous runs of a split entry: `count` elements starting at element
// `local` of the piece are elements `global` .. of the whole parameter (row-
// major). One run covering everything for an unsplit entry.
struct SplitRun {
  int64_t local = 0;
  int64_t global = 0;
  int64_t count = 0;
};
std::vector<SplitRun> split_runs(const ParameterEntry& entry);

// The ordered list of a model's parameters and their place in the flat buffers.
class ParameterTable {
 public:
  // Appends a parameter at the end of its dtype's buffer. `shape` is the
  // whole parameter's; with an active `split` the entry holds this rank's
  // piece (ParameterEntry::split), and the float32 init layout still advances
  // by the whole parameter, so every entry's init_offset is the one-process
  // table's. Errors: an empty or duplicate name, a non-floating dtype, a
  // zero_tail outside [0, numel], a split whose dimension does not divide
  // into blocks x parts (naming the parameter).
  absl::Status add(std::string name, const core::Shape& shape, core::DType dtype,
                   InitRule init = InitRule::zeros(), TensorSplit split = {});
  // Gives every entry the init_offset the entry of the same name has in
  // `whole`: a pipeline stage's table (a subset of the model's parameters)
  // then draws the values the whole model has. NotFound naming an entry
  // `whole` lacks.
  absl::Status adopt_init_offsets(const ParameterTable& whole);
  // Replaces the rule of `name` (a model adjusting its layers' defaults).
  // Errors: no such parameter (NotFound), a zero_tail outside [0, numel].
  absl::Status set_init(absl::string_view name, InitRule init);

  const std::vector<ParameterEntry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  // The entry called `name`, or null.
  const ParameterEntry* find(absl::string_view name) const;
  // Elements of the flat buffer of `dtype` (padding included; 0 if unused).
  int64_t buffer_numel(core::DType dtype) const;
  // Sum of the parameters' element counts (padding excluded).
  int64_t parameter_count() const;
  // The dtypes used, in the order of their first entry.
  const std::vector<core::DType>& dtypes() const { return dtypes_; }

 private:
  std::vector<ParameterEntry> entries_;
  absl::flat_hash_map<std::string, size_t> index_;
  std::vector<core::DType> dtypes_;
  absl::flat_hash_map<int, int64_t> buffer_numel_;
  absl::flat_hash_map<int, int64_t> init_numel_;  // per dtype, in a float32 layout
};

// A named view into the flat value and gradient buffers (shared storage).
// Undefined tensors while the parameter has no memory on this process.
struct Parameter {
  std::string name;
  core::Tensor value;
  core::Tensor grad;
};

namespace internal {
struct StoreState;
}

// A module's reference to one parameter of a store: cheap to copy, valid as
// long as any copy of the store or a handle lives. value() and grad() return
// the store's view at the time of the call.
class ParameterHandle {
 public:
  ParameterHandle() = default;
  const std::string& name() const;
  bool bound() const { return state_ != nullptr; }
  // True while the parameter has memory on this process.
  bool present() const;
  // The parameter's value / gradient view. FailedPreconditionError naming the
  // parameter when it has no memory (a declared model not materialized yet, a
  // parameter another rank or stage holds); also when never bound.
  absl::StatusOr<core::Tensor> value() const;
  absl::StatusOr<core::Tensor> grad() const;

 private:
  friend class ParameterStore;
  ParameterHandle(std::shared_ptr<internal::StoreState> state, size_t index)
      : state_(std::move(state)), index_(index) {}
  std::shared_ptr<internal::StoreState> state_;
  size_t index_ = 0;
};

// The parameters of one table and, once materialized, their memory. Copies
// share everything (the table, the buffers, what handles see): materializing
// one copy materializes them all.
class ParameterStore {
 public:
  ParameterStore() = default;

  // A store of `table` with no memory: handles can be bound, every parameter
  // is absent until allocate() (or a plugin) gives it memory.
  static ParameterStore declare(const ParameterTable& table);
  // declare(table) + allocate(stream): values and gradients zero.
  static absl::StatusOr<ParameterStore> create(const ParameterTable& table,
                                               const core::Stream& stream);

  // Replicated layout: one flat value and one flat gradient buffer per dtype
  // on `stream`'s device, zeroed, every parameter a view into them. With
  // Gradients::kPlugin only the value buffers: the gradients are a plugin's
  // from the start, as after release_grads() (low_level_zero stage 2 never
  // holds them whole). Errors: FailedPrecondition when already materialized;
  // ResourceExhausted naming the bytes needed and what the device has,
  // checked before anything is allocated when the device is smaller than that;
  // the device is not available.
  enum class Gradients { kFlat, kPlugin };
  absl::Status allocate(const core::Stream& stream, Gradients gradients = Gradients::kFlat);
  // Every parameter has memory on this process: its value, and its gradient
  // or, after release_grads(), a plugin that gives the gradient memory.
  bool materialized() const;
  // Bytes the replicated layout takes: values and gradients, padding included.
  int64_t replicated_bytes() const;

  // Draws every parameter's initial values from its rule (ParameterEntry::init)
  // and `seed`, enqueued on `stream` (a stream of the parameters' device;
  // Stream::cpu() for host memory). Errors: a parameter without memory
  // (FailedPrecondition naming it); a kernel's failure.
  absl::Status initialize(uint64_t seed, const core::Stream& stream = core::Stream::cpu());

  const ParameterTable& table() const;
  // The whole buffer of `dtype`, 1-D [table().buffer_numel(dtype)]; undefined
  // when the table has no parameter of that dtype or the store has no flat
  // buffer (not materialized).
  core::Tensor flat_values(core::DType dtype) const;
  core::Tensor flat_grads(core::DType dtype) const;
  // Every parameter, in table order (undefined tensors where absent).
  const std::vector<Parameter>& parameters() const;
  // The parameter called `name`. NotFoundError with the closest name otherwise.
  absl::StatusOr<Parameter> find(absl::string_view name) const;
  // A handle on the parameter called `name` (NotFoundError as find()).
  absl::StatusOr<ParameterHandle> handle(absl::string_view name) const;
  // Sets every gradient (the whole flat gradient buffers) to zero; after
  // release_grads(), the gradients that have memory.
  absl::Status zero_grad(const core::Stream& stream);

  // --- For a plugin that keeps only part of the gradients (low_level_zero
  // stage 2: a bucket's gradients have memory while the backward writes and
  // reduces them, then only this rank's shard of their sums stays). ---
  //
  // Drops the flat gradient buffers of an allocated store: every gradient is
  // absent until set_grad() gives it memory; values stay in their flat
  // buffers, and the store still counts as materialized. The buffers' memory
  // goes when no other holder (an optimizer's gradient views:
  // nn::Optimizer::drop_grads) remains. Errors: FailedPrecondition when the
  // store has no flat buffers.
  absl::Status release_grads();
  // Whether release_grads() was called: gradients are the plugin's.
  bool grads_released() const;
  // Points the gradient of parameter `index` at `grad` (undefined: absent),
  // after release_grads(). Errors: InvalidArgument naming the parameter for
  // another shape or dtype; FailedPrecondition before release_grads().
  absl::Status set_grad(size_t index, core::Tensor grad);

  // --- For plugins that keep parameters in memory of their own (Gemini's
  // chunks: a parameter has memory only while its chunk is gathered). ---
  //
  // Points parameter `index` (table order) at `value` and `grad`, either of
  // which may be undefined (absent). Defined tensors must have the entry's
  // shape and dtype. A store with flat buffers (allocate) refuses: its views
  // are the buffers'. Errors: InvalidArgument naming the parameter.
  absl::Status set_views(size_t index, core::Tensor value, core::Tensor grad);
  // Called by a handle whose parameter's value (want_grad false) or gradient
  // (true) is absent, before it reports the parameter missing: the plugin
  // brings the parameter in (set_views) and the handle reads again; an error
  // from the fetcher is the handle's error. One per store (null: none).
  using Fetcher = std::function<absl::Status(size_t index, bool want_grad)>;
  void set_fetcher(Fetcher fetcher);

 private:
  explicit ParameterStore(std::shared_ptr<internal::StoreState> state) : state_(std::move(state)) {}
  absl::StatusOr<size_t> index_of(absl::string_view name) const;
  std::shared_ptr<internal::StoreState> state_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODULE_PARAMETER_H_
