// Builtin all_reduce bandwidth, ranks as threads of this process, for each
// transport and a few sizes. Reports the buffer rate (bytes_per_second) and
// NCCL-tests' "bus bandwidth" (2(P-1)/P of it: what each link carries), so the
// numbers compare with nccl-tests and comm/nccl on the same sizes.
//
//   bazel run -c opt //comm/builtin:all_reduce_bench -- --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/builtin/process_group_builtin.h"
#include "comm/store/tcp_store.h"

namespace colossal::comm {
namespace {

std::shared_ptr<Store> connect(int port, bool master) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.listen_address = "127.0.0.1";
  o.port = port;
  o.is_master = master;
  auto s = TcpStore::create(o);
  return s.ok() ? std::shared_ptr<Store>(std::move(*s)) : nullptr;
}

void BM_AllReduce(benchmark::State& state) {
  const auto kind = static_cast<TransportKind>(state.range(0));
  const int world = static_cast<int>(state.range(1));
  const int64_t count = state.range(2) / 4;
  auto master = connect(0, true);
  if (master == nullptr) return state.SkipWithError("no loopback store");
  const int port = static_cast<TcpStore&>(*master).port();
  BuiltinOptions o;
  o.transport = kind;
  o.tcp.address = "127.0.0.1";

  // Ranks 1..P-1 follow rank 0 (this thread) one all_reduce per `go`.
  std::mutex mu;
  std::condition_variable cv;
  int64_t go = 0;
  bool stop = false;
  std::vector<std::thread> helpers;
  for (int r = 1; r < world; ++r) {
    helpers.emplace_back([&, r] {
      auto pg = ProcessGroupBuiltin::create(connect(port, false), r, world, o);
      if (!pg.ok()) return;
      std::vector<float> buf(count, 1.0f);
      for (int64_t done = 0;; ++done) {
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop || go > done; });
          if (go <= done) return;
        }
        auto w = (*pg)->all_reduce(Buffer::cpu(buf.data(), count), ReduceOp::kSum);
        if (w.ok()) (void)(*w)->wait();
      }
    });
  }
  auto pg = ProcessGroupBuiltin::create(master, 0, world, o);
  if (!pg.ok()) {
    state.SkipWithError(std::string(pg.status().message()).c_str());
  } else {
    std::vector<float> buf(count, 1.0f);
    for (auto _ : state) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ++go;
      }
      cv.notify_all();
      auto w = (*pg)->all_reduce(Buffer::cpu(buf.data(), count), ReduceOp::kSum);
      if (!w.ok() || !(*w)->wait().ok()) {
        state.SkipWithError("all_reduce failed");
        break;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  for (auto& t : helpers) t.join();
  const double bytes = static_cast<double>(count) * 4;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["busbw"] = benchmark::Counter(
      state.iterations() * bytes * 2.0 * (world - 1) / world, benchmark::Counter::kIsRate);
  state.SetLabel(transport_kind_name(kind));
}

BENCHMARK(BM_AllReduce)
    ->ArgNames({"transport", "ranks", "bytes"})
    ->ArgsProduct({{static_cast<int>(TransportKind::kInproc), static_cast<int>(TransportKind::kShm),
                    static_cast<int>(TransportKind::kTcp)},
                   {2, 4},
                   {4 << 10, 1 << 20, 64 << 20}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace colossal::comm

BENCHMARK_MAIN();
