// The builtin backend's cuda_ipc transport: one process per GPU, CUDA
// buffers moved device to device through CUDA IPC. The binary spawns itself
// as two ranks (comm/testing/multiprocess.h) on cuda:0 and cuda:1; every
// child runs the collectives on device buffers and checks them against the
// serial references (comm/testing/reference.h). Cases needing two GPUs skip
// without them; the construction test runs everywhere (a clear error without
// CUDA or without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "comm/builtin/child_group_testing.h"
#include "comm/builtin/process_group_builtin.h"
#include "comm/store/tcp_store.h"
#include "comm/testing/multiprocess.h"
#include "comm/testing/reference.h"
#include "core/device/device.h"
#include "tests/util/gpu_test.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::comm {
namespace {

using testing::child_env;

TEST(CudaIpcTransportTest, ParsesItsName) {
  auto t = parse_transport_kind("cuda_ipc");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, TransportKind::kCudaIpc);
  EXPECT_STREQ(transport_kind_name(TransportKind::kCudaIpc), "cuda_ipc");
}

// Without CUDA or without a GPU the group cannot be made, and says why.
TEST(CudaIpcTransportTest, CreateWithoutGpuSaysWhy) {
  if (builtin::cuda_ipc_transport_available() &&
      ::colossal::testing::cuda_devices_unavailable(1).empty()) {
    GTEST_SKIP() << "a GPU is present";
  }
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = (*server)->port();
  so.timeout = absl::Seconds(10);
  auto store = TcpStore::create(so);
  ASSERT_TRUE(store.ok()) << store.status();
  BuiltinOptions o;
  o.transport = TransportKind::kCudaIpc;
  auto pg = ProcessGroupBuiltin::create(std::shared_ptr<Store>(std::move(*store)), 0, 1, o);
  ASSERT_FALSE(pg.ok());
  EXPECT_NE(pg.status().message().find("cuda_ipc transport"), std::string::npos) << pg.status();
  if (!builtin::cuda_ipc_transport_available()) {
    EXPECT_NE(pg.status().message().find("not available"), std::string::npos) << pg.status();
  }
}

// A world group spanning hosts is refused before anything is set up.
TEST(CudaIpcTransportTest, RefusesPeersOnAnotherHost) {
  if (!builtin::cuda_ipc_transport_available()) GTEST_SKIP() << "built without CUDA";
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = (*server)->port();
  so.timeout = absl::Seconds(2);
  auto store = TcpStore::create(so);
  ASSERT_TRUE(store.ok()) << store.status();
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_WORLD_SIZE", "1", 1);
  auto t = builtin::CudaIpcTransport::create(**store, 0, 2, {});
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_WORLD_SIZE");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(t.status())) << t.status();
  EXPECT_NE(t.status().message().find("LOCAL_WORLD_SIZE=1 != WORLD_SIZE=2"), std::string::npos)
      << t.status();
  EXPECT_NE(t.status().message().find("nccl"), std::string::npos) << t.status();
}

#if COLOSSAL_WITH_CUDA

#define CHILD_CUDA(expr)                                                    \
  do {                                                                      \
    const cudaError_t e_ = (expr);                                          \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);  \
  } while (0)

struct ChildConfig : testing::ChildRank {
  size_t slot = 0;
};

std::optional<ChildConfig> child_config() {
  auto r = testing::child_rank();
  if (!r) return std::nullopt;
  ChildConfig c{*r};
  EXPECT_TRUE(absl::SimpleAtoi(child_env("COMM_TEST_SLOT"), &c.slot));
  return c;
}

std::shared_ptr<ProcessGroup> child_group(const ChildConfig& c, std::shared_ptr<Store>* store_out) {
  BuiltinOptions o;
  o.transport = TransportKind::kCudaIpc;
  o.timeout = absl::Seconds(60);
  o.cuda_ipc.device = c.rank;
  o.cuda_ipc.slot_bytes = c.slot;
  return testing::child_builtin_group(c, o, store_out);
}

absl::Status run_and_wait(absl::StatusOr<WorkPtr> w) {
  if (!w.ok()) return w.status();
  return (*w)->wait(absl::Seconds(60));
}

// Device memory holding `bytes` (at least 1 byte allocated).
class DeviceMem {
 public:
  explicit DeviceMem(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&p_, bytes == 0 ? 1 : bytes), cudaSuccess);
  }
  ~DeviceMem() { cudaFree(p_); }
  void* get() const { return p_; }
  void upload(const void* host) {
    if (bytes_) {
      EXPECT_EQ(cudaMemcpy(p_, host, bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> out(bytes_);
    if (bytes_) {
      EXPECT_EQ(cudaMemcpy(out.data(), p_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kI64};
// 0, 1, odd, ~4 MiB of float32, and > 2 slots (16 MiB) per chunk.
const int64_t kCounts[] = {0, 1, 7, 1000003, (int64_t{9} << 20) + 1};

void child_collectives(const ChildConfig& c) {
  CHILD_CUDA(cudaSetDevice(c.rank));
  auto pg = child_group(c, nullptr);
  ASSERT_NE(pg, nullptr);
  const int P = c.world, me = c.rank;
  const core::Device dev = core::Device::cuda(me);
  uint32_t seed = 100;

  // all_reduce: every dtype x op x count; inputs written on a stream of the
  // caller's that the collective must wait for.
  cudaStream_t user;
  CHILD_CUDA(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  for (DType dtype : kDtypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      if (op == ReduceOp::kAvg && dtype == DType::kI64) continue;
      for (int64_t n : kCounts) {
        SCOPED_TRACE(absl::StrCat("all_reduce ", core::dtype_name(dtype), " ", reduce_op_name(op),
                                  " x ", n));
        std::vector<std::vector<uint8_t>> in;
        for (int r = 0; r < P; ++r) in.push_back(testing::make_input(dtype, n, r, ++seed));
        DeviceMem buf(in[me].size());
        if (n > 0) {
          CHILD_CUDA(cudaMemcpyAsync(buf.get(), in[me].data(), in[me].size(),
                                     cudaMemcpyHostToDevice, user));
        }
        CollectiveOptions o;
        o.stream = core::Stream::cuda(dev, user);
        ASSERT_TRUE(run_and_wait(pg->all_reduce(Buffer{buf.get(), n, dtype, dev}, op, o)).ok());
        const std::vector<uint8_t> got = buf.download();
        EXPECT_EQ(testing::check_reduction(dtype, op, in, 0, got.data(), n), "");
      }
    }
  }
  CHILD_CUDA(cudaStreamSynchronize(user));
  CHILD_CUDA(cudaStreamDestroy(user));

  // reduce_scatter (output separate, and output aliasing the input's slice).
  for (DType dtype : kDtypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      if (op == ReduceOp::kAvg && dtype == DType::kI64) continue;
      for (int64_t n : kCounts) {
        if (n > 1000003 && op != ReduceOp::kSum) continue;  // keep the run short
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(absl::StrCat("reduce_scatter ", core::dtype_name(dtype), " ",
                                    reduce_op_name(op), " x ", n, in_place ? " in place" : ""));
          std::vector<std::vector<uint8_t>> in;
          for (int r = 0; r < P; ++r) in.push_back(testing::make_input(dtype, n * P, r, ++seed));
          const size_t esz = core::dtype_size(dtype);
          DeviceMem input(in[me].size());
          input.upload(in[me].data());
          DeviceMem separate(n * esz);
          void* out = in_place ? static_cast<char*>(input.get()) + me * n * esz : separate.get();
          ASSERT_TRUE(run_and_wait(pg->reduce_scatter(Buffer{out, n, dtype, dev},
                                                      Buffer{input.get(), n * P, dtype, dev},
                                                      op))
                          .ok());
          std::vector<uint8_t> got(n * esz);
          if (n) CHILD_CUDA(cudaMemcpy(got.data(), out, n * esz, cudaMemcpyDeviceToHost));
          EXPECT_EQ(testing::check_reduction(dtype, op, in, n * me, got.data(), n), "");
        }
      }
    }
  }

  // all_gather (separate input, and input being the output's slice).
  for (DType dtype : kDtypes) {
    for (int64_t n : kCounts) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(absl::StrCat("all_gather ", core::dtype_name(dtype), " x ", n,
                                  in_place ? " in place" : ""));
        std::vector<std::vector<uint8_t>> in;
        std::vector<uint8_t> want;
        for (int r = 0; r < P; ++r) {
          in.push_back(testing::make_input(dtype, n, r, ++seed));
          want.insert(want.end(), in[r].begin(), in[r].end());
        }
        const size_t esz = core::dtype_size(dtype);
        DeviceMem output(n * P * esz);
        DeviceMem separate(n * esz);
        separate.upload(in[me].data());
        void* input = separate.get();
        if (in_place) {
          input = static_cast<char*>(output.get()) + me * n * esz;
          if (n) CHILD_CUDA(cudaMemcpy(input, in[me].data(), n * esz, cudaMemcpyHostToDevice));
        }
        ASSERT_TRUE(run_and_wait(pg->all_gather(Buffer{output.get(), n * P, dtype, dev},
                                                Buffer{input, n, dtype, dev}))
                        .ok());
        const std::vector<uint8_t> got = output.download();
        EXPECT_EQ(testing::check_bytes(dtype, got.data(), want.data(), n * P), "");
      }
    }
  }

  // broadcast from every root.
  for (DType dtype : kDtypes) {
    for (int64_t n : kCounts) {
      for (int root = 0; root < P; ++root) {
        SCOPED_TRACE(absl::StrCat("broadcast ", core::dtype_name(dtype), " x ", n, " from ",
                                  root));
        const std::vector<uint8_t> want = testing::make_input(dtype, n, root, ++seed);
        const std::vector<uint8_t> mine = testing::make_input(dtype, n, me, seed + 1000);
        DeviceMem buf(want.size());
        buf.upload(me == root ? want.data() : mine.data());
        ASSERT_TRUE(run_and_wait(pg->broadcast(Buffer{buf.get(), n, dtype, dev}, root)).ok());
        const std::vector<uint8_t> got = buf.download();
        EXPECT_EQ(testing::check_bytes(dtype, got.data(), want.data(), n), "");
      }
    }
  }

  // all_to_all, small.
  {
    const int64_t block = 3;
    std::vector<int64_t> send(block * P), want(block * P);
    for (int j = 0; j < P; ++j) {
      for (int64_t k = 0; k < block; ++k) {
        send[j * block + k] = me * 100 + j * 10 + k;
        want[j * block + k] = j * 100 + me * 10 + k;
      }
    }
    DeviceMem in(send.size() * 8), out(send.size() * 8);
    in.upload(send.data());
    ASSERT_TRUE(run_and_wait(pg->all_to_all(Buffer{out.get(), block * P, DType::kI64, dev},
                                            Buffer{in.get(), block * P, DType::kI64, dev}))
                    .ok());
    const std::vector<uint8_t> got = out.download();
    EXPECT_EQ(testing::check_bytes(DType::kI64, got.data(), want.data(), block * P), "");
  }

  // Host buffers still work on this transport (over its shared-memory channel).
  {
    std::vector<float> h(1001, static_cast<float>(me + 1));
    ASSERT_TRUE(run_and_wait(pg->all_reduce(Buffer::cpu(h.data(), 1001), ReduceOp::kSum)).ok());
    for (float v : h) ASSERT_EQ(v, P * (P + 1) / 2.0f);
  }

  // A tensor on another rank's GPU is refused up front (the group stays usable).
  {
    const int other = (me + 1) % P;
    auto w = pg->all_reduce(Buffer{reinterpret_cast<void*>(0x1000), 4, DType::kF32,
                                   core::Device::cuda(other)},
                            ReduceOp::kSum);
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(w.status())) << w.status();
    EXPECT_NE(w.status().message().find(absl::StrCat("cuda:", me)), std::string::npos)
        << w.status();
  }
  ASSERT_TRUE(run_and_wait(pg->barrier()).ok());
}

// Rank 1 joins the group but never the all_reduce; rank 0 must time out.
void child_absent_peer(const ChildConfig& c) {
  CHILD_CUDA(cudaSetDevice(c.rank));
  std::shared_ptr<Store> store;
  auto pg = child_group(c, &store);
  ASSERT_NE(pg, nullptr);
  if (c.rank == 0) {
    DeviceMem buf(4 << 20);
    CollectiveOptions o;
    o.timeout = absl::Milliseconds(300);
    auto w = pg->all_reduce(Buffer{buf.get(), 1 << 20, DType::kF32, core::Device::cuda(0)},
                            ReduceOp::kSum, o);
    ASSERT_TRUE(w.ok()) << w.status();
    absl::Status s = (*w)->wait(absl::Seconds(30));
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_NE(s.message().find("all_reduce #0"), std::string::npos) << s;
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
    EXPECT_NE(s.message().find("timed out after 300ms"), std::string::npos) << s;
    EXPECT_NE(s.message().find("builtin/cuda_ipc"), std::string::npos) << s;
    ASSERT_TRUE(store->set("rank0_done", "1").ok());
  } else {
    ASSERT_TRUE(store->get("rank0_done").ok());
  }
}

TEST(CudaIpcChild, Run) {
  auto c = child_config();
  if (!c) GTEST_SKIP() << "runs only as a child of the tests below";
  if (c->scenario == "collectives") child_collectives(*c);
  if (c->scenario == "absent") child_absent_peer(*c);
}

void run_children(const std::string& scenario, int world, size_t slot) {
  testing::run_rank_processes("CudaIpcChild.Run", scenario, world,
                              {{"COMM_TEST_SLOT", std::to_string(slot)}}, absl::Seconds(240),
                              absl::StrCat(scenario, " (slot ", slot, ")"));
}

TEST(CudaIpcMultiGpuTest, Collectives) {
  COLOSSAL_REQUIRE_GPUS(2);
  run_children("collectives", 2, 0);
}

// Small slots: many pieces per step, both slots reused over and over.
TEST(CudaIpcMultiGpuTest, CollectivesWithSmallSlots) {
  COLOSSAL_REQUIRE_GPUS(2);
  run_children("collectives", 2, 64 << 10);
}

// Worlds of 3 and 4 ranks (one GPU each), when the host has the GPUs.
TEST(CudaIpcMultiGpuTest, CollectivesOnThreeAndFourGpus) {
  COLOSSAL_REQUIRE_GPUS(3);
  for (int world = 3; world <= std::min(4, core::cuda_device_count()); ++world) {
    run_children("collectives", world, 0);
  }
}

TEST(CudaIpcMultiGpuTest, AbsentPeerTimesOut) {
  COLOSSAL_REQUIRE_GPUS(2);
  run_children("absent", 2, 0);
}

#endif  // COLOSSAL_WITH_CUDA

}  // namespace
}  // namespace colossal::comm
