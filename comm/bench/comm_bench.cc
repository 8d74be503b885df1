// comm_bench: nccl-tests style collective benchmark for the builtin (CPU, and
// CUDA buffers with --transport cuda_ipc) and NCCL (GPU) process groups.
//
// Started once per rank with torchrun's variables (colossal run, comm/launch,
// torchrun, srun, mpirun: see comm/launch/env.h), or with --spawn N to start N
// local ranks itself through comm/launch. Rank 0 prints nccl-tests' table:
//
//   comm_bench --spawn 2 --backend builtin --transport shm --op all_reduce
//       --min_bytes 8 --max_bytes 64M --factor 2 --iters 20 --warmup 5 --dtype float32
//   comm_bench --spawn 2 --backend builtin --transport cuda_ipc ...   (cuda:LOCAL_RANK buffers)
//
// Sizes follow nccl-tests: "size" is the bytes of the largest buffer of the
// collective (all_reduce/broadcast: the buffer; reduce_scatter: the input;
// all_gather: the output; all_to_all: either), count = size / sizeof(type),
// algbw = size / time and busbw = algbw x the collective's factor
// (all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all (n-1)/n;
// broadcast 1). time is the mean over ranks of each rank's mean time per
// iteration. The first call at each size is checked against the expected
// result on every rank; "#wrong" counts wrong elements over all ranks, and the
// exit code is 1 when any are wrong.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "bazel/cuda_config.h"
#include "comm/builtin/process_group_builtin.h"
#include "comm/launch/env.h"
#include "comm/launch/launch.h"
#include "comm/nccl/process_group_nccl.h"
#include "comm/process_group/process_group.h"
#include "comm/store/tcp_store.h"
#include "core/dtype/dtype.h"
#include "kernels/common/half.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::comm {
namespace {

struct Flags {
  int spawn = 0;
  std::string backend = "builtin";
  std::string transport = "shm";
  std::string op = "all_reduce";
  int64_t min_bytes = 32 * 1024 * 1024;
  int64_t max_bytes = 32 * 1024 * 1024;
  double factor = 2;
  int iters = 20;
  int warmup = 5;
  std::string dtype = "float32";
  bool check = true;
};

constexpr const char* kUsage =
    "usage: comm_bench [--spawn N] [--backend builtin|nccl] [--transport shm|tcp|cuda_ipc]\n"
    "                  [--op all_reduce|reduce_scatter|all_gather|all_to_all|broadcast]\n"
    "                  [--min_bytes B] [--max_bytes B] [--factor F] [--iters N] [--warmup N]\n"
    "                  [--dtype float32|float64|float16|bfloat16|int32|int64] [--check 0|1]\n"
    "  (-b/-e/-f/-n/-w as nccl-tests; sizes take K, M, G suffixes)\n";

// "64M" -> 67108864.
absl::StatusOr<int64_t> parse_bytes(const std::string& name, absl::string_view v) {
  int64_t mult = 1;
  if (!v.empty()) {
    switch (v.back()) {
      case 'K': case 'k': mult = int64_t{1} << 10; break;
      case 'M': case 'm': mult = int64_t{1} << 20; break;
      case 'G': case 'g': mult = int64_t{1} << 30; break;
      default: break;
    }
    if (mult != 1) v.remove_suffix(1);
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "='", v, "' is not a byte count"));
  }
  return n * mult;
}

absl::StatusOr<Flags> parse_flags(int argc, char** argv, std::vector<std::string>* passthrough) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") return absl::CancelledError(kUsage);
    std::string key, value;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      key = arg.substr(2, eq - 2);
      value = arg.substr(eq + 1);
    } else if (arg.rfind("-", 0) == 0) {
      key = arg.substr(arg.rfind("--", 0) == 0 ? 2 : 1);
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'\n", kUsage));
    }
    if (key == "b") key = "min_bytes";
    if (key == "e") key = "max_bytes";
    if (key == "f") key = "factor";
    if (key == "n") key = "iters";
    if (key == "w") key = "warmup";
    auto bad = [&] {
      return absl::InvalidArgumentError(absl::StrCat("--", key, "='", value, "' is not valid"));
    };
    if (key == "spawn") {
      if (!absl::SimpleAtoi(value, &f.spawn) || f.spawn < 1) return bad();
      continue;  // not passed to the ranks
    }
    passthrough->push_back("--" + key + "=" + value);
    if (key == "backend") {
      f.backend = value;
    } else if (key == "transport") {
      f.transport = value;
    } else if (key == "op") {
      f.op = value;
    } else if (key == "min_bytes") {
      auto b = parse_bytes(key, value);
      if (!b.ok()) return b.status();
      f.min_bytes = *b;
    } else if (key == "max_bytes") {
      auto b = parse_bytes(key, value);
      if (!b.ok()) return b.status();
      f.max_bytes = *b;
    } else if (key == "factor") {
      if (!absl::SimpleAtod(value, &f.factor) || !(f.factor > 1)) return bad();
    } else if (key == "iters") {
      if (!absl::SimpleAtoi(value, &f.iters) || f.iters < 1) return bad();
    } else if (key == "warmup") {
      if (!absl::SimpleAtoi(value, &f.warmup) || f.warmup < 0) return bad();
    } else if (key == "dtype") {
      f.dtype = value;
    } else if (key == "check") {
      int c = 0;
      if (!absl::SimpleAtoi(value, &c)) return bad();
      f.check = c != 0;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", key, "\n", kUsage));
    }
  }
  if (f.backend != "builtin" && f.backend != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat("--backend='", f.backend,
                                                   "': expected builtin or nccl"));
  }
  if (f.transport != "shm" && f.transport != "tcp" && f.transport != "cuda_ipc") {
    return absl::InvalidArgumentError(absl::StrCat("--transport='", f.transport,
                                                   "': expected shm, tcp or cuda_ipc"));
  }
  if (f.op != "all_reduce" && f.op != "reduce_scatter" && f.op != "all_gather" &&
      f.op != "all_to_all" && f.op != "broadcast") {
    return absl::InvalidArgumentError(
        absl::StrCat("--op='", f.op,
                     "': expected all_reduce, reduce_scatter, all_gather, all_to_all or broadcast"));
  }
  if (f.max_bytes < f.min_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_bytes=", f.max_bytes, " is below --min_bytes=", f.min_bytes));
  }
  return f;
}

// ---- element access (values are small integers: exact in every dtype) ----

void put(void* p, int64_t i, DType t, double v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::kF64: static_cast<double*>(p)[i] = v; break;
    case DType::kF16: static_cast<kernels::Half*>(p)[i] = kernels::float_to_half(float(v)); break;
    case DType::kBF16:
      static_cast<kernels::BFloat16*>(p)[i] = kernels::float_to_bfloat16(float(v));
      break;
    case DType::kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::kI64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    default: break;
  }
}

double get(const void* p, int64_t i, DType t) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF64: return static_cast<const double*>(p)[i];
    case DType::kF16: return kernels::half_to_float(static_cast<const kernels::Half*>(p)[i]);
    case DType::kBF16:
      return kernels::bfloat16_to_float(static_cast<const kernels::BFloat16*>(p)[i]);
    case DType::kI32: return static_cast<const int32_t*>(p)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    default: return NAN;
  }
}

// Rank r's input element i: 1..8 (sums over up to 32 ranks stay exact in
// bfloat16/float16).
double value(int64_t i, int r) { return static_cast<double>((i + 3 * r) % 8 + 1); }

// ---- buffers on the backend's device ----

struct Mem {
  bool cuda = false;
  void* p = nullptr;
  size_t bytes = 0;
  Mem() = default;
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  ~Mem() {
#if COLOSSAL_WITH_CUDA
    if (cuda && p != nullptr) (void)cudaFree(p);
#endif
    if (!cuda) std::free(p);
  }
};

absl::Status alloc(Mem& m, size_t bytes, bool cuda) {
  m.cuda = cuda;
  m.bytes = bytes;
  if (!cuda) {
    m.p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    if (m.p == nullptr) return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes));
    std::memset(m.p, 0, bytes);
    return absl::OkStatus();
  }
#if COLOSSAL_WITH_CUDA
  cudaError_t e = cudaMalloc(&m.p, std::max<size_t>(bytes, 1));
  if (e != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc(", bytes, "): ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError("no CUDA in this build");
#endif
}

absl::Status copy(void* dst, const void* src, size_t bytes, bool cuda_dst, bool cuda_src) {
  if (!cuda_dst && !cuda_src) {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
#if COLOSSAL_WITH_CUDA
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaMemcpy: ", cudaGetErrorString(e)));
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError("no CUDA in this build");
#endif
}

absl::Status device_sync(bool cuda) {
#if COLOSSAL_WITH_CUDA
  if (cuda) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaDeviceSynchronize: ", cudaGetErrorString(e)));
    }
  }
#else
  (void)cuda;
#endif
  return absl::OkStatus();
}

// ---- one collective ----

struct Sizes {
  int64_t in_count = 0;   // elements of the input buffer
  int64_t out_count = 0;  // elements of the output buffer
  int64_t count = 0;      // nccl-tests' count: elements of the larger one
};

// nccl-tests' rounding: the total count a multiple of the group size where
// the collective splits it.
Sizes sizes_for(const std::string& op, int64_t bytes, size_t elem, int n) {
  Sizes s;
  int64_t count = bytes / static_cast<int64_t>(elem);
  if (op == "reduce_scatter" || op == "all_gather" || op == "all_to_all") count = count / n * n;
  s.count = count;
  if (op == "reduce_scatter") {
    s.in_count = count;
    s.out_count = count / n;
  } else if (op == "all_gather") {
    s.in_count = count / n;
    s.out_count = count;
  } else {
    s.in_count = s.out_count = count;
  }
  return s;
}

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

// In-place ops (all_reduce, broadcast) run on `out`, which holds the input
// before the checked call.
absl::StatusOr<WorkPtr> issue(ProcessGroup& pg, const std::string& op, const Buffer& in,
                              const Buffer& out) {
  if (op == "all_reduce") return pg.all_reduce(out, ReduceOp::kSum);
  if (op == "reduce_scatter") return pg.reduce_scatter(out, in, ReduceOp::kSum);
  if (op == "all_gather") return pg.all_gather(out, in);
  if (op == "all_to_all") return pg.all_to_all(out, in);
  return pg.broadcast(out, 0);
}

// Elements of this rank's `out` (host copy) that differ from the expected result.
int64_t count_wrong(const std::string& op, const void* out, int64_t out_count, DType t, int r,
                    int n) {
  int64_t wrong = 0;
  const int64_t block = op == "all_to_all" ? out_count / n : 0;
  for (int64_t i = 0; i < out_count; ++i) {
    double want = 0;
    if (op == "all_reduce") {
      for (int s = 0; s < n; ++s) want += value(i, s);
    } else if (op == "reduce_scatter") {
      for (int s = 0; s < n; ++s) want += value(r * out_count + i, s);
    } else if (op == "all_gather") {
      const int64_t per = out_count / n;
      want = value(i % per, static_cast<int>(i / per));
    } else if (op == "all_to_all") {
      const int s = static_cast<int>(i / block);
      want = value(r * block + i % block, s);
    } else {
      want = value(i, 0);
    }
    if (get(out, i, t) != want) ++wrong;
  }
  return wrong;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

absl::Status run_rank(const Flags& f) {
  auto me_or = discover_rank();
  if (!me_or.ok()) return me_or.status();
  const RankInfo me = *me_or;
  auto dtype_or = core::parse_dtype(f.dtype);
  if (!dtype_or.ok()) return dtype_or.status();
  const DType dtype = *dtype_or;
  if (dtype != DType::kF32 && dtype != DType::kF64 && dtype != DType::kF16 &&
      dtype != DType::kBF16 && dtype != DType::kI32 && dtype != DType::kI64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype=", f.dtype,
                     ": expected float32, float64, float16, bfloat16, int32 or int64"));
  }
  const size_t elem = core::dtype_size(dtype);
  // CUDA buffers for nccl and for the builtin backend's cuda_ipc transport.
  const bool cuda_ipc = f.backend == "builtin" && f.transport == "cuda_ipc";
  const bool cuda = f.backend == "nccl" || cuda_ipc;
  const int rank = me.rank;
  const int n = me.world_size;

  TcpStoreOptions so;
  so.host = me.master_addr;
  so.port = me.master_port;
  so.is_master = rank == 0;
  auto store_or = TcpStore::create(so);
  if (!store_or.ok()) return store_or.status();
  std::shared_ptr<Store> store(std::move(*store_or));

  std::shared_ptr<ProcessGroup> pg;
  core::Device device = core::Device::cpu();
  if (f.backend == "builtin") {
    BuiltinOptions bo;
    auto kind = parse_transport_kind(f.transport);
    if (!kind.ok()) return kind.status();
    bo.transport = *kind;
    if (bo.transport == TransportKind::kShm && me.local_world_size != me.world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--transport=shm needs every rank on one host (LOCAL_WORLD_SIZE=", me.local_world_size,
          ", WORLD_SIZE=", me.world_size, "); use --transport=tcp"));
    }
    bo.tcp.route_to = me.master_addr;
    if (cuda_ipc) {
#if COLOSSAL_WITH_CUDA
      if (me.local_world_size != me.world_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--transport=cuda_ipc needs every rank on one host (LOCAL_WORLD_SIZE=",
            me.local_world_size, ", WORLD_SIZE=", me.world_size, "); use --backend=nccl"));
      }
      cudaError_t e = cudaSetDevice(me.local_rank);
      if (e != cudaSuccess) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cudaSetDevice(", me.local_rank, "): ", cudaGetErrorString(e),
            " (--transport=cuda_ipc needs one GPU per local rank)"));
      }
      device = core::Device::cuda(me.local_rank);
      bo.cuda_ipc.device = me.local_rank;
#else
      return absl::FailedPreconditionError(
          "--transport=cuda_ipc: cuda_ipc transport: not available (this comm_bench was built "
          "without CUDA, COLOSSAL_WITH_CUDA=0); rebuild with the CUDA configuration");
#endif
    }
    auto g = ProcessGroupBuiltin::create(store, rank, n, bo);
    if (!g.ok()) return g.status();
    pg = std::move(*g);
  } else {
#if COLOSSAL_WITH_CUDA
    // NVLink SHARP (multicast) is not used by this project's machines.
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    cudaError_t e = cudaSetDevice(me.local_rank);
    if (e != cudaSuccess) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cudaSetDevice(", me.local_rank, "): ", cudaGetErrorString(e),
          " (--backend=nccl needs one GPU per local rank)"));
    }
    device = core::Device::cuda(me.local_rank);
    NcclOptions no;
    no.device = device;
    auto g = ProcessGroupNccl::create(store, rank, n, no);
    if (!g.ok()) return g.status();
    pg = std::move(*g);
#else
    return absl::FailedPreconditionError(
        "--backend=nccl: this comm_bench was built without CUDA (COLOSSAL_WITH_CUDA=0); "
        "rebuild with the CUDA configuration, or use --backend=builtin");
#endif
  }

  if (rank == 0) {
    std::printf("# comm_bench: %s, backend %s, %d ranks (%d per host), dtype %s\n",
                f.op.c_str(), pg->backend_name().c_str(), n, me.local_world_size,
                core::dtype_name(dtype));
    std::printf("# minBytes %lld maxBytes %lld step: %g(factor) warmup iters: %d iters: %d "
                "validation: %d\n#\n",
                static_cast<long long>(f.min_bytes), static_cast<long long>(f.max_bytes),
                f.factor, f.warmup, f.iters, f.check ? 1 : 0);
    std::printf("#%11s %12s %8s %6s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop",
                "root", "time", "algbw", "busbw", "#wrong");
    std::printf("#%11s %12s %8s %6s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "",
                "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }

  const bool reduces = f.op == "all_reduce" || f.op == "reduce_scatter";
  double busbw_sum = 0;
  int rows = 0;
  int64_t total_wrong = 0;
  int step = 0;
  for (double b = static_cast<double>(f.min_bytes); b <= static_cast<double>(f.max_bytes);
       b = std::max(b * f.factor, b + 1), ++step) {
    const int64_t bytes = static_cast<int64_t>(b);
    const Sizes s = sizes_for(f.op, bytes, elem, n);
    if (s.count == 0) continue;
    Mem in, out;
    absl::Status st = alloc(in, s.in_count * elem, cuda);
    if (st.ok()) st = alloc(out, s.out_count * elem, cuda);
    if (!st.ok()) return st;
    const Buffer bin{in.p, s.in_count, dtype, device};
    const Buffer bout{out.p, s.out_count, dtype, device};
    const bool in_place = f.op == "all_reduce" || f.op == "broadcast";

    // Checked call.
    int64_t wrong = 0;
    if (f.check) {
      std::vector<char> host(std::max(s.in_count, s.out_count) * elem);
      for (int64_t i = 0; i < s.in_count; ++i) put(host.data(), i, dtype, value(i, rank));
      if (in_place) {
        st = copy(out.p, host.data(), s.out_count * elem, cuda, false);
      } else {
        st = copy(in.p, host.data(), s.in_count * elem, cuda, false);
      }
      if (!st.ok()) return st;
      auto w = issue(*pg, f.op, bin, bout);
      if (!w.ok()) return w.status();
      if (absl::Status ws = (*w)->wait(); !ws.ok()) return ws;
      if (absl::Status ds = device_sync(cuda); !ds.ok()) return ds;
      if (absl::Status cs = copy(host.data(), out.p, s.out_count * elem, false, cuda); !cs.ok()) {
        return cs;
      }
      wrong = count_wrong(f.op, host.data(), s.out_count, dtype, rank, n);
    }
    for (int i = 0; i < f.warmup; ++i) {
      auto w = issue(*pg, f.op, bin, bout);
      if (!w.ok()) return w.status();
      if (absl::Status ws = (*w)->wait(); !ws.ok()) return ws;
    }
    if (absl::Status ds = device_sync(cuda); !ds.ok()) return ds;
    {
      auto w = pg->barrier();
      if (!w.ok()) return w.status();
      if (absl::Status ws = (*w)->wait(); !ws.ok()) return ws;
      if (absl::Status ds = device_sync(cuda); !ds.ok()) return ds;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<WorkPtr> works;
    works.reserve(f.iters);
    for (int i = 0; i < f.iters; ++i) {
      auto w = issue(*pg, f.op, bin, bout);
      if (!w.ok()) return w.status();
      works.push_back(std::move(*w));
    }
    for (auto& w : works) {
      if (absl::Status ws = w->wait(); !ws.ok()) return ws;
    }
    if (absl::Status ds = device_sync(cuda); !ds.ok()) return ds;
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        f.iters;

    // Times and wrong counts meet at rank 0 through the store (no device memory).
    const std::string key = absl::StrCat("comm_bench/", step, "/");
    st = store->set(absl::StrCat(key, rank), absl::StrFormat("%.17g %d", us, wrong));
    if (!st.ok()) return st;
    if (rank == 0) {
      double us_sum = 0;
      int64_t wrong_sum = 0;
      for (int r = 0; r < n; ++r) {
        auto v = store->get(absl::StrCat(key, r));
        if (!v.ok()) return v.status();
        double t = 0;
        long long wr = 0;
        if (std::sscanf(v->c_str(), "%lf %lld", &t, &wr) != 2) {
          return absl::InternalError(absl::StrCat("bad result '", *v, "' from rank ", r));
        }
        us_sum += t;
        wrong_sum += wr;
      }
      const double t = us_sum / n;
      const double size = static_cast<double>(s.count) * elem;
      const double algbw = size / 1e3 / t;  // bytes/us / 1e3 = GB/s
      const double busbw = algbw * bus_factor(f.op, n);
      busbw_sum += busbw;
      ++rows;
      total_wrong += wrong_sum;
      std::printf("%12.0f %12lld %8s %6s %6s %10.2f %8.3f %8.3f %7s\n", size,
                  static_cast<long long>(s.count),
                  core::dtype_name(dtype), reduces ? "sum" : "none",
                  f.op == "broadcast" ? "0" : "-1", t, algbw, busbw,
                  f.check ? absl::StrCat(wrong_sum).c_str() : "N/A");
      std::fflush(stdout);
    }
  }
  {
    auto w = pg->barrier();
    if (!w.ok()) return w.status();
    if (absl::Status ws = w.value()->wait(); !ws.ok()) return ws;
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                total_wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g\n#\n", rows > 0 ? busbw_sum / rows : 0.0);
    std::fflush(stdout);
  }
  if (total_wrong != 0) return absl::DataLossError(absl::StrCat(total_wrong, " wrong values"));
  return absl::OkStatus();
}

int main_impl(int argc, char** argv) {
  std::vector<std::string> pass;
  auto flags = parse_flags(argc, argv, &pass);
  if (!flags.ok()) {
    if (absl::IsCancelled(flags.status())) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "comm_bench: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->spawn > 0) {
    char self[4096];
    const ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) {
      std::fprintf(stderr, "comm_bench: cannot read /proc/self/exe\n");
      return 2;
    }
    self[len] = '\0';
    LaunchOptions lo;
    lo.command.push_back(self);
    for (auto& a : pass) lo.command.push_back(a);
    lo.nproc_per_node = flags->spawn;
    lo.master_addr = "127.0.0.1";
    lo.master_port = free_port();
    lo.prefix_output = false;  // rank 0 prints the table; other ranks print only errors
    lo.grace_period = absl::Seconds(2);
    auto r = launch(lo);
    if (!r.ok()) {
      std::fprintf(stderr, "comm_bench: %s\n", std::string(r.status().message()).c_str());
      return 2;
    }
    if (r->exit_code != 0) std::fprintf(stderr, "comm_bench: %s\n", r->message.c_str());
    return r->exit_code;
  }
  absl::Status st = run_rank(*flags);
  if (!st.ok()) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "comm_bench (rank %s): %s\n", rank != nullptr ? rank : "0",
                 std::string(st.message()).c_str());
    return absl::IsDataLoss(st) ? 1 : 3;
  }
  return 0;
}

}  // namespace
}  // namespace colossal::comm

int main(int argc, char** argv) { return colossal::comm::main_impl(argc, argv); }
