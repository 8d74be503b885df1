// The NCCL backend with ranks as threads, one GPU and one communicator each
// (needs 2 GPUs; skips otherwise), against the serial references of
// comm/testing/reference.h. NVLink multicast (NVLS) is switched off before
// NCCL starts: it must never be used on the shared GPU hosts.
#include "comm/nccl/process_group_nccl.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bazel/cuda_config.h"
#include "comm/testing/ranks.h"
#include "comm/testing/reference.h"
#include "core/device/device.h"
#include "core/tensor/tensor.h"
#include "tests/util/gpu_test.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::comm {
namespace {

class NcclEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { setenv("NCCL_NVLS_ENABLE", "0", 1); }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new NcclEnvironment);

TEST(ProcessGroupNcclTest, UnavailableWithoutAGpu) {
  if (core::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  auto master = testing::loopback_store(absl::Seconds(5));
  NcclOptions o;
  o.device = core::Device::cuda(0);
  auto pg = ProcessGroupNccl::create(master, 0, 1, o);
  ASSERT_FALSE(pg.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(pg.status())) << pg.status();
  o.device = core::Device::cpu();
  auto cpu = ProcessGroupNccl::create(master, 0, 1, o);
  EXPECT_FALSE(cpu.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ProcessGroupNccl::create(master, 2, 1, o).status()));
}

#if COLOSSAL_WITH_CUDA

constexpr int kWorld = 2;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Host bytes -> new device buffer (freed by the caller with cudaFree).
void* to_device(const std::vector<uint8_t>& host) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, std::max<size_t>(host.size(), 1)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}
std::vector<uint8_t> to_host(const void* d, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

void with_nccl(const std::function<void(ProcessGroupNccl&, Store&)>& body,
               absl::Duration timeout = absl::Seconds(60)) {
  auto master = testing::loopback_store();
  testing::run_ranks(kWorld, [&](int rank) {
    CUDA_OK(cudaSetDevice(rank));
    auto store = testing::store_client(master->port());
    NcclOptions o;
    o.device = core::Device::cuda(rank);
    o.timeout = timeout;
    auto pg = ProcessGroupNccl::create(store, rank, kWorld, o);
    ASSERT_TRUE(pg.ok()) << pg.status();
    body(**pg, *store);
  });
}

absl::Status finish(absl::StatusOr<WorkPtr> w) {
  if (!w.ok()) return w.status();
  return (*w)->wait(absl::Seconds(60));
}

TEST(ProcessGroupNcclTest, AllReduceReduceAndReduceScatterMatchReferences) {
  COLOSSAL_REQUIRE_GPUS(kWorld);
  with_nccl([](ProcessGroupNccl& pg, Store&) {
    const core::Device dev = core::Device::cuda(pg.rank());
    uint32_t seed = 1;
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        if (op == ReduceOp::kAvg && dtype == DType::kI64) continue;
        for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
          std::vector<std::vector<uint8_t>> in;
          for (int r = 0; r < kWorld; ++r) in.push_back(testing::make_input(dtype, n, r, seed));
          ++seed;
          void* d = to_device(in[pg.rank()]);
          ASSERT_TRUE(finish(pg.all_reduce(Buffer{d, n, dtype, dev}, op)).ok());
          auto got = to_host(d, in[0].size());
          EXPECT_EQ(testing::check_reduction(dtype, op, in, 0, got.data(), n), "")
              << reduce_op_name(op) << " " << core::dtype_name(dtype) << " x " << n;
          cudaFree(d);
          // reduce to the last rank, in place: the root has the reduction,
          // the others' buffers are as they were (NCCL only reads them).
          const int root = kWorld - 1;
          d = to_device(in[pg.rank()]);
          ASSERT_TRUE(finish(pg.reduce(Buffer{d, n, dtype, dev}, op, root)).ok());
          got = to_host(d, in[0].size());
          if (pg.rank() == root) {
            EXPECT_EQ(testing::check_reduction(dtype, op, in, 0, got.data(), n), "")
                << "reduce " << reduce_op_name(op) << " " << core::dtype_name(dtype) << " x " << n;
          } else {
            EXPECT_EQ(got, in[pg.rank()]) << "reduce changed a non-root buffer";
          }
          cudaFree(d);
          // reduce_scatter: n per rank.
          std::vector<std::vector<uint8_t>> full;
          for (int r = 0; r < kWorld; ++r) full.push_back(testing::make_input(dtype, n * kWorld, r, seed));
          ++seed;
          void* din = to_device(full[pg.rank()]);
          void* dout = nullptr;
          ASSERT_EQ(cudaMalloc(&dout, n * core::dtype_size(dtype)), cudaSuccess);
          ASSERT_TRUE(finish(pg.reduce_scatter(Buffer{dout, n, dtype, dev},
                                               Buffer{din, n * kWorld, dtype, dev}, op)).ok());
          auto rs = to_host(dout, n * core::dtype_size(dtype));
          EXPECT_EQ(testing::check_reduction(dtype, op, full, n * pg.rank(), rs.data(), n), "");
          cudaFree(din);
          cudaFree(dout);
        }
      }
    }
  });
}

TEST(ProcessGroupNcclTest, GatherAllToAllBroadcastSendRecvBarrier) {
  COLOSSAL_REQUIRE_GPUS(kWorld);
  with_nccl([](ProcessGroupNccl& pg, Store&) {
    const int me = pg.rank(), peer = 1 - me;
    const core::Device dev = core::Device::cuda(me);
    EXPECT_EQ(pg.backend_name(), "nccl");
    // all_gather of int64 blocks.
    const int64_t n = 1001;
    std::vector<int64_t> mine(n);
    for (int64_t i = 0; i < n; ++i) mine[i] = me * n + i;
    std::vector<uint8_t> bytes(reinterpret_cast<uint8_t*>(mine.data()),
                               reinterpret_cast<uint8_t*>(mine.data() + n));
    void* din = to_device(bytes);
    void* dout = nullptr;
    ASSERT_EQ(cudaMalloc(&dout, n * kWorld * 8), cudaSuccess);
    ASSERT_TRUE(finish(pg.all_gather(Buffer{dout, n * kWorld, DType::kI64, dev},
                                     Buffer{din, n, DType::kI64, dev})).ok());
    auto gathered = to_host(dout, n * kWorld * 8);
    const int64_t* g = reinterpret_cast<const int64_t*>(gathered.data());
    for (int64_t i = 0; i < n * kWorld; ++i) ASSERT_EQ(g[i], i);
    // all_to_all with variable splits: rank r sends (r + j + 1) elements to j.
    std::vector<int64_t> send_counts(kWorld), recv_counts(kWorld);
    std::vector<int64_t> send;
    for (int j = 0; j < kWorld; ++j) {
      send_counts[j] = me + j + 1;
      recv_counts[j] = j + me + 1;
      for (int64_t k = 0; k < send_counts[j]; ++k) send.push_back(me * 100 + j * 10 + k);
    }
    const int64_t recv_total = recv_counts[0] + recv_counts[1];
    std::vector<uint8_t> send_bytes(reinterpret_cast<uint8_t*>(send.data()),
                                    reinterpret_cast<uint8_t*>(send.data() + send.size()));
    void* dsend = to_device(send_bytes);
    void* drecv = nullptr;
    ASSERT_EQ(cudaMalloc(&drecv, recv_total * 8), cudaSuccess);
    ASSERT_TRUE(finish(pg.all_to_all(Buffer{drecv, recv_total, DType::kI64, dev}, recv_counts,
                                     Buffer{dsend, static_cast<int64_t>(send.size()), DType::kI64, dev},
                                     send_counts)).ok());
    auto recv_bytes = to_host(drecv, recv_total * 8);
    const int64_t* rv = reinterpret_cast<const int64_t*>(recv_bytes.data());
    size_t at = 0;
    for (int r = 0; r < kWorld; ++r) {
      for (int64_t k = 0; k < recv_counts[r]; ++k) EXPECT_EQ(rv[at++], r * 100 + me * 10 + k);
    }
    // broadcast from rank 1.
    std::vector<float> b(777, me == 1 ? 2.5f : 0.0f);
    void* db = to_device(std::vector<uint8_t>(reinterpret_cast<uint8_t*>(b.data()),
                                              reinterpret_cast<uint8_t*>(b.data() + b.size())));
    ASSERT_TRUE(finish(pg.broadcast(Buffer{db, 777, DType::kF32, dev}, 1)).ok());
    auto bb = to_host(db, 777 * 4);
    EXPECT_EQ(reinterpret_cast<const float*>(bb.data())[776], 2.5f);
    // A batched exchange (both send first: only safe grouped).
    std::vector<int32_t> out(5000, me), in(5000, -1);
    void* dso = to_device(std::vector<uint8_t>(reinterpret_cast<uint8_t*>(out.data()),
                                               reinterpret_cast<uint8_t*>(out.data() + out.size())));
    void* dri = nullptr;
    ASSERT_EQ(cudaMalloc(&dri, 5000 * 4), cudaSuccess);
    const std::vector<P2POp> ops = {{P2POp::Kind::kSend, Buffer{dso, 5000, DType::kI32, dev}, peer},
                                    {P2POp::Kind::kRecv, Buffer{dri, 5000, DType::kI32, dev}, peer}};
    ASSERT_TRUE(finish(pg.batch_send_recv(ops)).ok());
    auto ri = to_host(dri, 5000 * 4);
    EXPECT_EQ(reinterpret_cast<const int32_t*>(ri.data())[4999], peer);
    ASSERT_TRUE(finish(pg.barrier()).ok());
    for (void* p : {din, dout, dsend, drecv, db, dso, dri}) cudaFree(p);
    // Host buffers are refused with a pointer to the builtin backend.
    float host = 0;
    auto bad = pg.all_reduce(Buffer::cpu(&host, 1), ReduceOp::kSum);
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
    EXPECT_NE(bad.status().message().find("builtin"), std::string::npos) << bad.status();
  });
}

TEST(ProcessGroupNcclTest, StreamOrderingAndTensorsAndSubgroups) {
  COLOSSAL_REQUIRE_GPUS(kWorld);
  with_nccl([](ProcessGroupNccl& pg, Store&) {
    const core::Device dev = core::Device::cuda(pg.rank());
    auto compute = core::OwnedStream::create(dev);
    ASSERT_TRUE(compute.ok());
    const core::Stream& s = compute->get();
    auto t = core::Tensor::empty({1 << 20}, DType::kF32, s);
    ASSERT_TRUE(t.ok()) << t.status();
    // Produced on the compute stream, no host sync before the collective.
    std::vector<float> host(1 << 20, static_cast<float>(pg.rank() + 1));
    CUDA_OK(cudaMemcpyAsync(t->raw_data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice,
                            s.handle()));
    CollectiveOptions o;
    o.stream = s;
    auto w = pg.all_reduce(*t, ReduceOp::kSum, o);
    ASSERT_TRUE(w.ok()) << w.status();
    (*w)->wait_stream(s);  // the copy back runs after the all_reduce, host free
    std::vector<float> back(host.size());
    CUDA_OK(cudaMemcpyAsync(back.data(), t->raw_data(), back.size() * 4, cudaMemcpyDeviceToHost,
                            s.handle()));
    s.synchronize();
    EXPECT_TRUE((*w)->is_completed());
    EXPECT_EQ(back[0], 3.0f);
    EXPECT_EQ(back.back(), 3.0f);
    // A subgroup of one rank each.
    auto solo = pg.new_group({pg.rank()});
    ASSERT_TRUE(solo.ok()) << solo.status();
    auto other = pg.new_group({1 - pg.rank()});
    ASSERT_TRUE(other.ok());
    EXPECT_EQ(*other, nullptr);
    ASSERT_NE(*solo, nullptr);
    ASSERT_TRUE(finish((*solo)->all_reduce(*t, ReduceOp::kMax)).ok());
  });
}

TEST(ProcessGroupNcclTest, WatchdogAbortsAHungCollective) {
  COLOSSAL_REQUIRE_GPUS(kWorld);
  with_nccl(
      [](ProcessGroupNccl& pg, Store& store) {
        const core::Device dev = core::Device::cuda(pg.rank());
        void* d = nullptr;
        ASSERT_EQ(cudaMalloc(&d, 4096), cudaSuccess);
        // Both ranks first run one all_reduce together: NCCL connects peers
        // lazily, inside the first collective's call on the host, so a first
        // collective the peer never joins would hang in that call, before any
        // watchdog could see it. Afterwards the hang is on the GPU, where the
        // watchdog must catch it.
        ASSERT_TRUE(finish(pg.all_reduce(Buffer{d, 1024, DType::kF32, dev}, ReduceOp::kSum)).ok());
        if (pg.rank() == 0) {
          CollectiveOptions o;
          o.timeout = absl::Seconds(2);
          auto w = pg.all_reduce(Buffer{d, 1024, DType::kF32, dev}, ReduceOp::kSum, o);
          ASSERT_TRUE(w.ok()) << w.status();
          absl::Status s = (*w)->wait(absl::Seconds(30));
          EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
          EXPECT_NE(s.message().find("NCCL watchdog"), std::string::npos) << s;
          EXPECT_NE(s.message().find("all_reduce #1"), std::string::npos) << s;
          EXPECT_NE(s.message().find("4096 bytes"), std::string::npos) << s;
          auto later = pg.barrier();
          EXPECT_TRUE(absl::IsFailedPrecondition(later.status())) << later.status();
          ASSERT_TRUE(store.set("rank0_done", "1").ok());
          // `d` is not freed: cudaFree may wait for the aborted kernel to leave the GPU.
        } else {
          // Never joins the all_reduce; stays alive until rank 0 has seen the timeout
          // (the watchdog's 2 s, then the abort: longer than the store's default wait).
          ASSERT_TRUE(store.wait({std::string("rank0_done")}, absl::Minutes(2)).ok());
          cudaFree(d);
        }
      },
      absl::Seconds(30));
}

#endif  // COLOSSAL_WITH_CUDA

}  // namespace
}  // namespace colossal::comm
