// CUDA-event timing of Google Benchmark iterations, for benchmarks of CUDA code.
//
// CudaBenchTimer owns a start and a stop event (created by the constructor,
// destroyed by the destructor) and times one iteration at a time:
//
//   #if COLOSSAL_WITH_CUDA
//   void BM_ReduceCuda(benchmark::State& state) {
//     ...
//     testing::CudaBenchTimer timer;  // the default stream; or timer(stream)
//     for (auto _ : state) {
//       if (!timer.time(state, [&] { return reduce_into_cuda(..., nullptr); })) break;
//     }
//     ...
//   }
//   BENCHMARK(BM_ReduceCuda)->UseManualTime();
//   #endif
//
// time(state, run) does, in this order:
//   1. records the start event on the timer's stream,
//   2. calls run() once (which should enqueue its work on that stream),
//   3. records the stop event on the same stream,
//   4. waits for it on the host (cudaEventSynchronize): every iteration
//      synchronizes, so iterations never overlap and nothing of one iteration
//      is left running when the next starts,
//   5. sets the iteration's manual time (register the benchmark with
//      ->UseManualTime()) to the time between the two events divided by
//      `calls` (the constructor's; 1 unless run() makes several calls and the
//      benchmark reports the time of one).
// What it times is the device time between the events on that stream: the
// work run() enqueues on it, and whatever else the stream orders between them
// (the legacy default stream, nullptr, orders all blocking streams). Work on
// another stream the timer's stream does not wait for is not timed; host time
// in run() counts only where it leaves the stream idle.
//
// run() returns a status (anything with ok() and message(), e.g.
// kernels::KernelStatus or absl::Status), a bool (false: it failed), or
// nothing. A failed run, or a failed CUDA event call (e.g. a fault in the
// timed work, reported by the synchronize), calls state.SkipWithError with the
// status's message, or with `error` (time()'s last argument, "CUDA error" by
// default) when there is none, and time() returns false without setting the
// iteration time: the caller breaks out of its loop. A failed run is reported
// at once, without recording the stop event or waiting for it.
//
// The whole header is empty when the build has no CUDA (COLOSSAL_WITH_CUDA 0):
// include it, and use it, under #if COLOSSAL_WITH_CUDA as the CUDA benchmark
// itself. Depend on //tests/util:cuda_bench_timer.
#ifndef COLOSSAL_TESTS_UTIL_CUDA_BENCH_TIMER_H_
#define COLOSSAL_TESTS_UTIL_CUDA_BENCH_TIMER_H_

#include "bazel/cuda_config.h"

#if COLOSSAL_WITH_CUDA

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <string>
#include <type_traits>
#include <utility>

namespace colossal::testing {

class CudaBenchTimer {
 public:
  // Times work on `stream` (the legacy default stream when nullptr); each
  // iteration's time is divided by `calls`.
  explicit CudaBenchTimer(cudaStream_t stream = nullptr, int calls = 1)
      : stream_(stream), calls_(calls) {
    created_ = cudaEventCreate(&start_) == cudaSuccess;
    created_ = cudaEventCreate(&stop_) == cudaSuccess && created_;
  }
  ~CudaBenchTimer() {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
  }
  CudaBenchTimer(const CudaBenchTimer&) = delete;
  CudaBenchTimer& operator=(const CudaBenchTimer&) = delete;

  // Times one iteration of run() as the header describes; false (after
  // state.SkipWithError) if it failed.
  template <typename Run>
  bool time(benchmark::State& state, Run&& run, const char* error = "CUDA error") {
    if (!created_ || cudaEventRecord(start_, stream_) != cudaSuccess) return fail(state, error);
    using Result = std::invoke_result_t<Run&>;
    if constexpr (std::is_void_v<Result>) {
      run();
    } else if constexpr (std::is_same_v<std::decay_t<Result>, bool>) {
      if (!run()) return fail(state, error);
    } else {
      const auto status = run();
      if (!status.ok()) return fail(state, std::string(status.message()).c_str());
    }
    float ms = 0;
    if (cudaEventRecord(stop_, stream_) != cudaSuccess ||
        cudaEventSynchronize(stop_) != cudaSuccess ||
        cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess) {
      return fail(state, error);
    }
    elapsed_ms_ = ms;
    state.SetIterationTime(ms / 1e3 / calls_);
    return true;
  }

  // The last timed iteration's time between the events in milliseconds, all
  // `calls` together (not divided); 0 before the first.
  float elapsed_ms() const { return elapsed_ms_; }

 private:
  static bool fail(benchmark::State& state, const char* message) {
    state.SkipWithError(message);
    return false;
  }

  cudaStream_t stream_;
  int calls_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  bool created_ = false;
  float elapsed_ms_ = 0;
};

}  // namespace colossal::testing

#endif  // COLOSSAL_WITH_CUDA

#endif  // COLOSSAL_TESTS_UTIL_CUDA_BENCH_TIMER_H_
