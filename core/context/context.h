// colossal::core — the per-process runtime context.
//
// One Context per process (principle 5 of docs/DESIGN.md): its device, a
// compute stream and a communication stream with an event to order them, the
// device's allocator, a cuBLASLt handle and a cuBLAS handle sharing one
// workspace, the GEMM algorithm cache, and the random-number state (seed +
// offset) the generator kernels consume. On the CPU both streams are the
// synchronous CPU stream and there is no cuBLAS(Lt).
//
//   COLOSSAL_RETURN_IF_ERROR(Context::initialize(Device::cuda(local_rank)));
//   Context& ctx = Context::get();
//   ... backward enqueued on ctx.compute_stream() ...
//   ctx.wait(ctx.comm_stream(), ctx.compute_stream());   // comm waits for the gradients
//   ... all-reduce on ctx.comm_stream() ...
//   ctx.wait(ctx.compute_stream(), ctx.comm_stream());   // optimizer waits for the all-reduce
//   RngState r = ctx.next_offset(4 * n);                  // reserve 4n random numbers
//   // a Philox kernel then uses (r.seed, r.offset): streams never overlap
//
// Tests and tools may create private contexts with Context::create().
#ifndef COLOSSAL_CORE_CONTEXT_CONTEXT_H_
#define COLOSSAL_CORE_CONTEXT_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/alloc/allocator.h"
#include "core/context/matmul_algo_cache.h"
#include "core/device/device.h"
#include "core/device/stream.h"

struct cublasLtContext;  // cublasLtHandle_t is cublasLtContext*
struct cublasContext;    // cublasHandle_t is cublasContext*

namespace colossal::core {

// How core/gemm chooses a cuBLASLt algorithm the first time it sees a problem
// (CUDA only; see core/gemm/gemm.h):
//   kOff  cuBLASLt's first heuristic choice. Deterministic: the same GPU and
//         cuBLAS version always pick the same algorithm, so results repeat
//         bit for bit across runs and processes.
//   kOn   time cuBLASLt's top heuristic candidates on the compute stream and
//         keep the fastest (once per problem and context; the choice can
//         differ between runs, so results may differ in the last bits).
//   kLog  kOn, and print each tuning's candidates and times to stderr.
enum class GemmAutotune { kOff, kOn, kLog };

// The value of the environment variable COLOSSAL_GEMM_AUTOTUNE (null: unset):
// unset or "" -> kOn; "0", "off", "false" -> kOff; "1", "on", "true" -> kOn;
// "log" -> kLog. Anything else is an InvalidArgumentError naming the variable.
absl::StatusOr<GemmAutotune> parse_gemm_autotune(const char* value);

// The value of the environment variable COLOSSAL_DETERMINISTIC (null: unset):
// unset, "", "0", "off", "false" -> false; "1", "on", "true" -> true.
// Anything else is an InvalidArgumentError naming the variable.
absl::StatusOr<bool> parse_deterministic(const char* value);

struct ContextOptions {
  // Workspace for cuBLASLt and cuBLAS (CUDA only). 32 MiB lets Hopper pick its fastest
  // kernels (split-K and stream-K need scratch); it equals PyTorch's default
  // on Hopper (the workspace its cuBLAS and cuBLASLt calls get), so it is kept.
  size_t cublaslt_workspace_bytes = size_t{32} << 20;
  // GEMM algorithm autotuning. Unset: the environment variable
  // COLOSSAL_GEMM_AUTOTUNE decides (parse_gemm_autotune; on by default, off
  // when the context is deterministic and the variable is unset).
  std::optional<GemmAutotune> gemm_autotune;
  // Results that repeat bit for bit, run after run: kernels that have a
  // faster variant whose floating-point adds happen in a varying order (the
  // attention backward's fused dQ on Hopper) take their deterministic one,
  // and GEMMs skip autotuning unless gemm_autotune says otherwise. Unset: the
  // environment variable COLOSSAL_DETERMINISTIC decides (parse_deterministic;
  // off by default).
  std::optional<bool> deterministic;
  // The initial random seed.
  uint64_t seed = 0;
  // Give the communication stream CUDA's highest priority, so collectives
  // are scheduled ahead of queued compute kernels.
  bool high_priority_comm_stream = true;
};

// A counter-based RNG position: generator kernels produce the numbers at
// offsets [offset, offset + n) of the stream named by `seed`.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  friend bool operator==(const RngState& a, const RngState& b) = default;
};

class Context {
 public:
  // A new context for `device`: creates its streams, event and (CUDA) the
  // cuBLASLt and cuBLAS handles and their workspace. Does not change the thread's current device.
  // Errors: the device is not available; the workspace does not fit;
  // COLOSSAL_GEMM_AUTOTUNE or COLOSSAL_DETERMINISTIC is read and holds no
  // valid value.
  static absl::StatusOr<std::unique_ptr<Context>> create(Device device,
                                                         const ContextOptions& options = {});

  // Creates the process context for `device` and makes it the calling thread's
  // current CUDA device. Calling it again for the same device is a no-op (the
  // options of the first call stay); for another device it is a
  // FailedPreconditionError. Errors as create().
  static absl::Status initialize(Device device, const ContextOptions& options = {});
  static bool initialized();
  // The process context. Calling it before initialize() is a bug and aborts.
  // It lives until the process exits.
  static Context& get();

  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device device() const { return device_; }
  // Where ops run by default.
  const Stream& compute_stream() const { return compute_.get(); }
  // Where collectives run (high priority by default).
  const Stream& comm_stream() const { return comm_.get(); }
  // The device's process-wide allocator (device_allocator(device())).
  const std::shared_ptr<Allocator>& allocator() const { return allocator_; }

  // Makes `waiter` wait, on the device, for everything enqueued on `producer`
  // so far (an event recorded on producer; the host does not block, unless
  // `waiter` is the CPU stream). `producer` must be a stream of this context's
  // device. Thread-safe.
  void wait(const Stream& waiter, const Stream& producer);
  // Blocks the host until both streams are idle.
  void synchronize() const;

  // Random numbers. All thread-safe.
  // Sets the seed and resets the offset to 0.
  void manual_seed(uint64_t seed);
  RngState rng_state() const;
  // Restores a state from rng_state() (checkpoint resume).
  void set_rng_state(const RngState& state);
  // Reserves `n` numbers: returns the state to generate them from and advances
  // the offset by n, so every caller gets a disjoint range.
  RngState next_offset(uint64_t n);

  // cuBLASLt (null / 0 on the CPU). The workspace belongs to the compute
  // stream: GEMMs using it run on compute_stream().
  cublasLtContext* cublaslt_handle() const { return cublaslt_; }
  void* cublaslt_workspace() const { return workspace_ ? workspace_->data() : nullptr; }
  size_t cublaslt_workspace_bytes() const { return workspace_ ? workspace_->nbytes() : 0; }
  // cuBLAS (null on the CPU), for core/gemm's cublasGemmEx candidate. Created
  // with CUBLAS_POINTER_MODE_HOST and the default math mode, its workspace set to
  // cublaslt_workspace() (the two are never used at once: both run on the
  // compute stream). cublasSetStream resets a handle's workspace, so a caller
  // holds cublas_mutex() while it sets the stream, then the workspace, then
  // enqueues its call.
  cublasContext* cublas_handle() const { return cublas_; }
  std::mutex& cublas_mutex() const { return cublas_mu_; }
  MatmulAlgoCache& matmul_algo_cache() { return algo_cache_; }
  // How GEMMs choose their algorithms (ContextOptions::gemm_autotune, resolved).
  GemmAutotune gemm_autotune() const { return gemm_autotune_; }
  // Whether kernels take their deterministic variants
  // (ContextOptions::deterministic, resolved).
  bool deterministic() const { return deterministic_; }

 private:
  Context(Device device, OwnedStream compute, OwnedStream comm, Event event,
          std::shared_ptr<Allocator> allocator, uint64_t seed, GemmAutotune gemm_autotune,
          bool deterministic);

  const Device device_;
  OwnedStream compute_;
  OwnedStream comm_;
  std::mutex event_mu_;
  Event event_;
  std::shared_ptr<Allocator> allocator_;

  mutable std::mutex rng_mu_;
  RngState rng_;

  cublasLtContext* cublaslt_ = nullptr;
  cublasContext* cublas_ = nullptr;
  mutable std::mutex cublas_mu_;
  std::shared_ptr<Storage> workspace_;
  MatmulAlgoCache algo_cache_;
  const GemmAutotune gemm_autotune_;
  const bool deterministic_;
};

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_CONTEXT_CONTEXT_H_
