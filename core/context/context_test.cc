#include "core/context/context.h"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/util/gpu_test.h"

#if COLOSSAL_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

namespace colossal::core {
namespace {

bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

// Runs first (in its own process) while the process context does not exist yet.
TEST(ContextDeathTest, GetBeforeInitializeAborts) {
  if (Context::initialized()) GTEST_SKIP() << "process context already created";
  EXPECT_DEATH(Context::get(), "Context::get\\(\\) before Context::initialize\\(device\\)");
}

TEST(ContextTest, CpuContext) {
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cpu());
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  Context& c = **ctx;
  EXPECT_EQ(c.device(), Device::cpu());
  EXPECT_EQ(c.compute_stream(), Stream::cpu());
  EXPECT_EQ(c.comm_stream(), Stream::cpu());
  EXPECT_EQ(c.cublaslt_handle(), nullptr);
  EXPECT_EQ(c.cublas_handle(), nullptr);
  EXPECT_EQ(c.cublaslt_workspace(), nullptr);
  EXPECT_EQ(c.cublaslt_workspace_bytes(), 0u);
  EXPECT_EQ(c.allocator()->device(), Device::cpu());
  c.wait(c.comm_stream(), c.compute_stream());  // a no-op on the CPU
  c.synchronize();
  EXPECT_EQ(c.matmul_algo_cache().size(), 0u);
}

TEST(ContextTest, RngOffsetsAreDisjointReservations) {
  ContextOptions options;
  options.seed = 1234;
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cpu(), options);
  ASSERT_TRUE(ctx.ok());
  Context& c = **ctx;
  EXPECT_EQ(c.rng_state(), (RngState{1234, 0}));
  EXPECT_EQ(c.next_offset(100), (RngState{1234, 0}));
  EXPECT_EQ(c.next_offset(28), (RngState{1234, 100}));
  EXPECT_EQ(c.next_offset(0), (RngState{1234, 128}));
  EXPECT_EQ(c.rng_state(), (RngState{1234, 128}));
  const RngState saved = c.rng_state();
  c.manual_seed(7);
  EXPECT_EQ(c.rng_state(), (RngState{7, 0}));
  EXPECT_EQ(c.next_offset(5), (RngState{7, 0}));
  c.set_rng_state(saved);  // resume from a checkpoint
  EXPECT_EQ(c.next_offset(1), (RngState{1234, 128}));
}

TEST(ContextTest, RngReservationsFromManyThreadsNeverOverlap) {
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cpu());
  ASSERT_TRUE(ctx.ok());
  Context& c = **ctx;
  std::vector<std::vector<uint64_t>> offsets(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) offsets[t].push_back(c.next_offset(10).offset);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<uint64_t> all;
  for (auto& v : offsets) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], 10 * i);
  EXPECT_EQ(c.rng_state().offset, 40000u);
}

TEST(ContextTest, ParseGemmAutotune) {
  EXPECT_EQ(*parse_gemm_autotune(nullptr), GemmAutotune::kOn);
  EXPECT_EQ(*parse_gemm_autotune(""), GemmAutotune::kOn);
  for (const char* on : {"1", "on", "true"}) EXPECT_EQ(*parse_gemm_autotune(on), GemmAutotune::kOn);
  for (const char* off : {"0", "off", "false"}) {
    EXPECT_EQ(*parse_gemm_autotune(off), GemmAutotune::kOff);
  }
  EXPECT_EQ(*parse_gemm_autotune("log"), GemmAutotune::kLog);
  const absl::Status s = parse_gemm_autotune("yes please").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "environment variable COLOSSAL_GEMM_AUTOTUNE=\"yes please\": "
                                    "expected 0"))
      << s;
}

// Sets an environment variable for one scope, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) {
      had_ = true;
      old_ = old;
    }
    set(value);
  }
  ~ScopedEnv() { set(had_ ? old_.c_str() : nullptr); }

 private:
  void set(const char* value) {
    if (value != nullptr) {
      setenv(name_, value, 1);
    } else {
      unsetenv(name_);
    }
  }

  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(ContextTest, GemmAutotuneFromOptionsOrEnvironment) {
  {
    ScopedEnv env("COLOSSAL_GEMM_AUTOTUNE", nullptr);
    absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cpu());
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    EXPECT_EQ((*ctx)->gemm_autotune(), GemmAutotune::kOn);  // the default
  }
  {
    ScopedEnv env("COLOSSAL_GEMM_AUTOTUNE", "0");
    absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cpu());
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    EXPECT_EQ((*ctx)->gemm_autotune(), GemmAutotune::kOff);
    ContextOptions options;
    options.gemm_autotune = GemmAutotune::kLog;  // the option wins over the environment
    ctx = Context::create(Device::cpu(), options);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    EXPECT_EQ((*ctx)->gemm_autotune(), GemmAutotune::kLog);
  }
  {
    ScopedEnv env("COLOSSAL_GEMM_AUTOTUNE", "maybe");
    const absl::Status s = Context::create(Device::cpu()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(s.message(), "creating the context for cpu: environment variable "
                                      "COLOSSAL_GEMM_AUTOTUNE=\"maybe\""))
        << s;
    ContextOptions options;
    options.gemm_autotune = GemmAutotune::kOff;  // not read when the option is set
    EXPECT_TRUE(Context::create(Device::cpu(), options).ok());
  }
}

TEST(ContextTest, ParseDeterministic) {
  EXPECT_FALSE(*parse_deterministic(nullptr));
  for (const char* off : {"", "0", "off", "false"}) EXPECT_FALSE(*parse_deterministic(off));
  for (const char* on : {"1", "on", "true"}) EXPECT_TRUE(*parse_deterministic(on));
  const absl::Status s = parse_deterministic("always").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "environment variable COLOSSAL_DETERMINISTIC=\"always\": "
                                    "expected 1"))
      << s;
}

// deterministic: off by default; COLOSSAL_DETERMINISTIC=1 turns it on and,
// unless COLOSSAL_GEMM_AUTOTUNE (or the option) says otherwise, GEMM
// autotuning off; the option wins over the environment.
TEST(ContextTest, DeterministicFromOptionsOrEnvironment) {
  ScopedEnv tune("COLOSSAL_GEMM_AUTOTUNE", nullptr);
  {
    ScopedEnv env("COLOSSAL_DETERMINISTIC", nullptr);
    absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cpu());
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    EXPECT_FALSE((*ctx)->deterministic());
    EXPECT_EQ((*ctx)->gemm_autotune(), GemmAutotune::kOn);
  }
  {
    ScopedEnv env("COLOSSAL_DETERMINISTIC", "1");
    absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cpu());
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    EXPECT_TRUE((*ctx)->deterministic());
    EXPECT_EQ((*ctx)->gemm_autotune(), GemmAutotune::kOff);
    {
      ScopedEnv on("COLOSSAL_GEMM_AUTOTUNE", "1");  // an explicit choice stays
      ctx = Context::create(Device::cpu());
      ASSERT_TRUE(ctx.ok()) << ctx.status();
      EXPECT_EQ((*ctx)->gemm_autotune(), GemmAutotune::kOn);
    }
    ContextOptions options;
    options.deterministic = false;
    ctx = Context::create(Device::cpu(), options);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    EXPECT_FALSE((*ctx)->deterministic());
    EXPECT_EQ((*ctx)->gemm_autotune(), GemmAutotune::kOn);
  }
  {
    ScopedEnv env("COLOSSAL_DETERMINISTIC", "yes");
    const absl::Status s = Context::create(Device::cpu()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(s.message(), "creating the context for cpu: environment variable "
                                      "COLOSSAL_DETERMINISTIC=\"yes\""))
        << s;
  }
}

TEST(ContextTest, CudaContextNeedsCuda) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  const absl::Status s = Context::create(Device::cuda(0)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "creating the context for cuda:0: device cuda:0 is not available"))
      << s;
}

// The process context: one device per process. Runs on the GPU when there is
// one, else on the CPU.
TEST(ContextTest, ProcessContextIsInitializedOnce) {
  const Device device = cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
  ASSERT_TRUE(Context::initialize(device).ok());
  EXPECT_TRUE(Context::initialized());
  EXPECT_EQ(Context::get().device(), device);
  EXPECT_TRUE(Context::initialize(device).ok());  // again: a no-op
  Context* first = &Context::get();
  const Device other = device.is_cpu() ? Device::cuda(0) : Device::cpu();
  const absl::Status s = Context::initialize(other);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "the process context already exists for " + device.to_string()))
      << s;
  EXPECT_EQ(&Context::get(), first);
}

#if COLOSSAL_WITH_CUDA
struct Probe {
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
};
void CUDART_CB slow_set(void* p) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  static_cast<Probe*>(p)->flag.store(1);
}
void CUDART_CB observe(void* p) {
  auto* probe = static_cast<Probe*>(p);
  probe->seen.store(probe->flag.load());
}
#endif

TEST(ContextCudaTest, StreamsHandleAndWorkspace) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  ContextOptions options;
  options.cublaslt_workspace_bytes = 4 << 20;
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cuda(0), options);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  Context& c = **ctx;
  EXPECT_EQ(c.device(), Device::cuda(0));
  EXPECT_TRUE(c.compute_stream().is_cuda());
  EXPECT_TRUE(c.comm_stream().is_cuda());
  EXPECT_NE(c.compute_stream().handle(), nullptr);
  EXPECT_NE(c.compute_stream(), c.comm_stream());
  int compute_priority = 0, comm_priority = 0;
  ASSERT_EQ(cudaStreamGetPriority(c.compute_stream().handle(), &compute_priority), cudaSuccess);
  ASSERT_EQ(cudaStreamGetPriority(c.comm_stream().handle(), &comm_priority), cudaSuccess);
  EXPECT_LE(comm_priority, compute_priority);  // lower number = higher priority
  EXPECT_NE(c.cublaslt_handle(), nullptr);
  EXPECT_NE(c.cublaslt_workspace(), nullptr);
  EXPECT_EQ(c.cublaslt_workspace_bytes(), size_t{4} << 20);
  // cuBLAS: host pointer mode, on the compute stream.
  ASSERT_NE(c.cublas_handle(), nullptr);
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_DEVICE;
  ASSERT_EQ(cublasGetPointerMode(c.cublas_handle(), &mode), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mode, CUBLAS_POINTER_MODE_HOST);
  cudaStream_t blas_stream = nullptr;
  ASSERT_EQ(cublasGetStream(c.cublas_handle(), &blas_stream), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(blas_stream, c.compute_stream().handle());
  EXPECT_EQ(c.allocator()->device(), Device::cuda(0));
  EXPECT_GE(c.allocator()->stats().allocated_bytes, int64_t{4} << 20);  // the workspace
  c.synchronize();
#endif
}

TEST(ContextCudaTest, WaitOrdersCommAfterCompute) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cuda(0));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  Context& c = **ctx;
  Probe probe;
  ASSERT_EQ(cudaLaunchHostFunc(c.compute_stream().handle(), slow_set, &probe), cudaSuccess);
  c.wait(c.comm_stream(), c.compute_stream());
  ASSERT_EQ(cudaLaunchHostFunc(c.comm_stream().handle(), observe, &probe), cudaSuccess);
  c.comm_stream().synchronize();
  EXPECT_EQ(probe.seen.load(), 1);

  // And the other way round, with work queued on comm first.
  Probe back;
  ASSERT_EQ(cudaLaunchHostFunc(c.comm_stream().handle(), slow_set, &back), cudaSuccess);
  c.wait(c.compute_stream(), c.comm_stream());
  ASSERT_EQ(cudaLaunchHostFunc(c.compute_stream().handle(), observe, &back), cudaSuccess);
  c.synchronize();
  EXPECT_EQ(back.seen.load(), 1);
#endif
}

TEST(ContextCudaTest, WorkspaceThatDoesNotFitIsAnError) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  ContextOptions options;
  options.cublaslt_workspace_bytes = size_t{1} << 50;
  const absl::Status s = Context::create(Device::cuda(0), options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(s.message(), "creating the context for cuda:0: cuBLASLt workspace: out of "
                                    "memory on cuda:0"))
      << s;
#endif
}

}  // namespace
}  // namespace colossal::core
