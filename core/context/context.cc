#include "core/context/context.h"

#include <atomic>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/alloc/default_allocator.h"
#include "core/status/check.h"
#include "core/status/cublas_check.h"
#include "core/status/cuda_check.h"
#include "core/status/status.h"

#if COLOSSAL_WITH_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

namespace colossal::core {
namespace {

std::mutex g_init_mu;
std::atomic<Context*> g_context{nullptr};

}  // namespace

absl::StatusOr<GemmAutotune> parse_gemm_autotune(const char* value) {
  if (value == nullptr) return GemmAutotune::kOn;
  const absl::string_view v(value);
  if (v.empty() || v == "1" || v == "on" || v == "true") return GemmAutotune::kOn;
  if (v == "0" || v == "off" || v == "false") return GemmAutotune::kOff;
  if (v == "log") return GemmAutotune::kLog;
  return absl::InvalidArgumentError(
      absl::StrCat("environment variable COLOSSAL_GEMM_AUTOTUNE=\"", v,
                   "\": expected 0 (cuBLASLt's first heuristic choice, deterministic), 1 (time the "
                   "top candidates, the default) or log (1, and print the timings)"));
}

absl::StatusOr<bool> parse_deterministic(const char* value) {
  if (value == nullptr) return false;
  const absl::string_view v(value);
  if (v.empty() || v == "0" || v == "off" || v == "false") return false;
  if (v == "1" || v == "on" || v == "true") return true;
  return absl::InvalidArgumentError(
      absl::StrCat("environment variable COLOSSAL_DETERMINISTIC=\"", v,
                   "\": expected 1 (results repeat bit for bit: deterministic kernels, no GEMM "
                   "autotuning unless COLOSSAL_GEMM_AUTOTUNE says so) or 0 (the default)"));
}

Context::Context(Device device, OwnedStream compute, OwnedStream comm, Event event,
                 std::shared_ptr<Allocator> allocator, uint64_t seed, GemmAutotune gemm_autotune,
                 bool deterministic)
    : device_(device),
      compute_(std::move(compute)),
      comm_(std::move(comm)),
      event_(std::move(event)),
      allocator_(std::move(allocator)),
      rng_{seed, 0},
      gemm_autotune_(gemm_autotune),
      deterministic_(deterministic) {}

absl::StatusOr<std::unique_ptr<Context>> Context::create(Device device,
                                                         const ContextOptions& options) {
  const std::string what = absl::StrCat("creating the context for ", device.to_string());
  bool deterministic = false;
  if (options.deterministic.has_value()) {
    deterministic = *options.deterministic;
  } else {
    absl::StatusOr<bool> parsed = parse_deterministic(std::getenv("COLOSSAL_DETERMINISTIC"));
    if (!parsed.ok()) return annotate(parsed.status(), what);
    deterministic = *parsed;
  }
  GemmAutotune gemm_autotune = GemmAutotune::kOn;
  if (options.gemm_autotune.has_value()) {
    gemm_autotune = *options.gemm_autotune;
  } else {
    const char* env = std::getenv("COLOSSAL_GEMM_AUTOTUNE");
    absl::StatusOr<GemmAutotune> parsed = parse_gemm_autotune(env);
    if (!parsed.ok()) return annotate(parsed.status(), what);
    gemm_autotune = env == nullptr && deterministic ? GemmAutotune::kOff : *parsed;
  }
  COLOSSAL_RETURN_IF_ERROR(annotate(check_device_available(device), what));
  COLOSSAL_ASSIGN_OR_RETURN(OwnedStream compute, OwnedStream::create(device));
  COLOSSAL_ASSIGN_OR_RETURN(
      OwnedStream comm,
      OwnedStream::create(device, options.high_priority_comm_stream ? StreamPriority::kHigh
                                                                    : StreamPriority::kNormal));
  COLOSSAL_ASSIGN_OR_RETURN(Event event, Event::create(device));
  COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<Allocator> allocator, device_allocator(device));
  std::unique_ptr<Context> ctx(new Context(device, std::move(compute), std::move(comm),
                                           std::move(event), std::move(allocator), options.seed,
                                           gemm_autotune, deterministic));
#if COLOSSAL_WITH_CUDA
  if (device.is_cuda()) {
    DeviceGuard guard(device);
    cublasLtHandle_t handle = nullptr;
    CUBLAS_CHECK(cublasLtCreate(&handle));
    ctx->cublaslt_ = handle;
    absl::StatusOr<std::shared_ptr<Storage>> workspace =
        Storage::allocate(ctx->allocator_, options.cublaslt_workspace_bytes, ctx->compute_stream());
    if (!workspace.ok()) return annotate(workspace.status(), what + ": cuBLASLt workspace");
    ctx->workspace_ = *std::move(workspace);
    cublasHandle_t cublas = nullptr;
    CUBLAS_CHECK(cublasCreate(&cublas));
    ctx->cublas_ = cublas;
    CUBLAS_CHECK(cublasSetPointerMode(cublas, CUBLAS_POINTER_MODE_HOST));
    CUBLAS_CHECK(cublasSetStream(cublas, ctx->compute_stream().handle()));
    // After cublasSetStream, which resets the workspace to cuBLAS's own pool.
    CUBLAS_CHECK(cublasSetWorkspace(cublas, ctx->workspace_->data(), ctx->workspace_->nbytes()));
  }
#endif
  return ctx;
}

Context::~Context() {
  synchronize();
#if COLOSSAL_WITH_CUDA
  if (cublas_ != nullptr) {  // before its workspace is freed
    DeviceGuard guard(device_);
    CUBLAS_CHECK(cublasDestroy(cublas_));
  }
  if (cublaslt_ != nullptr) {
    DeviceGuard guard(device_);
    CUBLAS_CHECK(cublasLtDestroy(cublaslt_));
  }
#endif
  workspace_.reset();  // freed on the compute stream, which is idle
}

absl::Status Context::initialize(Device device, const ContextOptions& options) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (Context* existing = g_context.load()) {
    if (existing->device() == device) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("Context::initialize(", device.to_string(),
                     "): the process context already exists for ",
                     existing->device().to_string(), "; one process uses one device"));
  }
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, create(device, options));
#if COLOSSAL_WITH_CUDA
  if (device.is_cuda()) CUDA_CHECK(cudaSetDevice(device.index()));
#endif
  g_context.store(ctx.release());  // lives until exit, like the allocators it uses
  return absl::OkStatus();
}

bool Context::initialized() { return g_context.load() != nullptr; }

Context& Context::get() {
  Context* ctx = g_context.load();
  COLOSSAL_CHECK(ctx != nullptr) << "Context::get() before Context::initialize(device)";
  return *ctx;
}

void Context::wait(const Stream& waiter, const Stream& producer) {
  std::lock_guard<std::mutex> lock(event_mu_);
  wait_stream(waiter, producer, event_);
}

void Context::synchronize() const {
  compute_stream().synchronize();
  comm_stream().synchronize();
}

void Context::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(rng_mu_);
  rng_ = RngState{seed, 0};
}

RngState Context::rng_state() const {
  std::lock_guard<std::mutex> lock(rng_mu_);
  return rng_;
}

void Context::set_rng_state(const RngState& state) {
  std::lock_guard<std::mutex> lock(rng_mu_);
  rng_ = state;
}

RngState Context::next_offset(uint64_t n) {
  std::lock_guard<std::mutex> lock(rng_mu_);
  const RngState reserved = rng_;
  rng_.offset += n;
  return reserved;
}

}  // namespace colossal::core
