// gemm_algo_sweep: times cuBLASLt algorithm configurations for one GEMM beyond the ones
// cublasLtMatmulAlgoGetHeuristic returns. core/gemm autotunes over the heuristic's top
// candidates plus cublasGemmEx: for bf16 8192^3 (row-major NN) on an H100 that gives ~690
// TFLOP/s where torch.matmul gives ~718. This enumerates algo id x tile x stages x cluster
// shape x CTA swizzle x custom option x split-K (1, then 2), keeps what cublasLtMatmulAlgoCheck
// accepts within our workspace, times it, and prints the winners' raw config values for a
// later change to hard-code. Run on a GPU machine:
//   bazel run -c opt //core/gemm:gemm_algo_sweep -- --dtype bf16
// Flags (--name=value or --name value): --dtype bf16|fp16, --m --n --k (8192), --trans_b 0|1,
// --top 15 (configs re-timed), --max_configs 4000 (valid configs kept), --max_checks 200000
// (cublasLtMatmulAlgoCheck calls), --reps 10 (calls per batch), --screen_seconds 240.
//
// The problem is gemm_cuda.cc's, set up by its cublas_args and matmul_algo_key: row-major
// C (m x n) = A (m x k) B (k x n; n x k with --trans_b) is column-major D (n x m) = op(B) A for
// cuBLAS(Lt), whose A is our B, with the same alignment preferences; core/context's
// 32 MiB workspace; CUBLAS_COMPUTE_32F, scale CUDA_R_32F, alpha 1, beta 0, C == D; inputs
// uniform in [-1, 1) (zeros draw less power and run faster than real data).
// Timing: kWarmups calls, then CUDA events around batches of --reps back-to-back calls.
// Screen: median of 5 batches (one, if it is over 1.25x the best so far). Final: baselines and
// the best --top re-timed in 30 interleaved rounds of one batch each, median. TFLOP/s = 2mnk/t.
#include "bazel/cuda_config.h"

#include <cstdio>

#if !COLOSSAL_WITH_CUDA
int main() {
  std::printf("gemm_algo_sweep: built without CUDA (--config=cpu); nothing to sweep.\n");
  return 0;
}
#else

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "core/gemm/gemm_internal.h"
#include "core/status/check.h"
#include "core/status/cublas_check.h"
#include "core/status/cuda_check.h"
#include "kernels/common/half.h"

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // core/context: cublaslt_workspace_bytes
constexpr int kWarmups = 3, kScreenBatches = 5, kFinalRounds = 30, kHeuristicCount = 32;
constexpr float kPruneFactor = 1.25f;

// Names by enum value (nullptr: a gap; other values print as "#id"). Tiles: ids 0..35 only
// (CUDA 13 has 600+).
const char* const kTiles[] = {
    "undef", "8x8", "8x16", "16x8", "8x32", "16x16", "32x8", "8x64", "16x32", "32x16", "64x8",
    "32x32", "32x64", "64x32", "32x128", "64x64", "128x32", "64x128", "128x64", "64x256",
    "128x128", "256x64", "64x512", "128x256", "256x128", "512x64", "64x96", "96x64", "96x128",
    "128x160", "160x128", "192x128", "128x192", "128x96", "32x256", "256x32"};
const char* const kStages[] = {
    "undef", "16x1", "16x2", "16x3", "16x4", "16x5", "16x6", "32x1", "32x2", "32x3", "32x4",
    "32x5", "32x6", "64x1", "64x2", "64x3", "64x4", "64x5", "64x6", "128x1", "128x2", "128x3",
    "128x4", "128x5", "128x6", "32x10", "8x4", "16x10", "8x5", nullptr, nullptr, "8x3", "8xAUTO",
    "16xAUTO", "32xAUTO", "64xAUTO", "128xAUTO", "256xAUTO", "768xAUTO"};
const char* const kClusters[] = {"auto", nullptr, "1x1", "2x1", "4x1", "1x2", "2x2", "4x2", "1x4",
                                 "2x4", "4x4", "8x1", "1x8", "8x2", "2x8", "16x1", "1x16"};
static_assert(CUBLASLT_MATMUL_TILE_256x32 == 35 && CUBLASLT_MATMUL_TILE_128x256 == 23);
static_assert(CUBLASLT_MATMUL_STAGES_768xAUTO == 38 && CUBLASLT_CLUSTER_SHAPE_1x16x1 == 16);

template <size_t N>
std::string name(const char* const (&table)[N], uint32_t id) {
  return id < N && table[id] ? table[id] : "#" + std::to_string(id);
}

struct Flags {
  std::string dtype = "bf16";
  int64_t m = 8192, n = 8192, k = 8192, trans_b = 0, top = 15, reps = 10, max_configs = 4000;
  int64_t max_checks = 200000;
  double screen_seconds = 240;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  const std::pair<std::string, int64_t*> ints[] = {
      {"--m", &f.m},       {"--n", &f.n},     {"--k", &f.k},       {"--trans_b", &f.trans_b},
      {"--top", &f.top},   {"--reps", &f.reps}, {"--max_configs", &f.max_configs},
      {"--max_checks", &f.max_checks}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--benchmark_", 0) == 0) continue;  // tools/gpu/run.sh passes these
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    const std::string value = eq != std::string::npos ? arg.substr(eq + 1) : i + 1 < argc ? argv[++i] : "";
    bool known = key == "--dtype" || key == "--screen_seconds";
    if (key == "--dtype") f.dtype = value;
    if (key == "--screen_seconds") f.screen_seconds = std::atof(value.c_str());
    for (const auto& [flag, field] : ints) {
      if (key == flag) *field = std::atoll(value.c_str()), known = true;
    }
    if (!known || (f.dtype != "bf16" && f.dtype != "fp16") || f.m <= 0 || f.n <= 0 || f.k <= 0 || f.reps <= 0) {
      std::fprintf(stderr, "gemm_algo_sweep: bad flag %s (see core/gemm/gemm_algo_sweep.cc)\n", arg.c_str());
      std::exit(2);
    }
  }
  return f;
}

// One algorithm configuration: cublasLtMatmulAlgoConfigAttributes_t values in their types.
struct Config {
  int32_t id = 0;
  uint32_t tile = 0, stages = 0;
  uint16_t cluster = 0, inner = 0;
  uint32_t swizzle = 0, custom = 0, reduction = 0;
  int32_t splitk = 1;
  bool operator==(const Config&) const = default;
};

// Each attribute with its field; the id first (read-only, set by cublasLtMatmulAlgoInit).
std::vector<std::tuple<cublasLtMatmulAlgoConfigAttributes_t, void*, size_t>> fields(Config& c) {
  return {{CUBLASLT_ALGO_CONFIG_ID, &c.id, sizeof(c.id)},
          {CUBLASLT_ALGO_CONFIG_TILE_ID, &c.tile, sizeof(c.tile)},
          {CUBLASLT_ALGO_CONFIG_STAGES_ID, &c.stages, sizeof(c.stages)},
          {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c.cluster, sizeof(c.cluster)},
          {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &c.inner, sizeof(c.inner)},
          {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c.swizzle, sizeof(c.swizzle)},
          {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c.custom, sizeof(c.custom)},
          {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &c.reduction, sizeof(c.reduction)},
          {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c.splitk, sizeof(c.splitk)}};
}

Config read_config(const cublasLtMatmulAlgo_t& algo) {
  Config c;
  for (const auto& [attr, field, size] : fields(c)) {
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, field, size, &written) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "warning: cannot read config attribute %d\n", static_cast<int>(attr));
    }
  }
  return c;
}

bool apply_config(cublasLtMatmulAlgo_t& algo, Config c) {  // false if an attribute is refused
  const auto all = fields(c);
  return std::all_of(all.begin() + 1, all.end(), [&](const auto& a) {
    const auto& [attr, field, size] = a;
    return cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, field, size) == CUBLAS_STATUS_SUCCESS;
  });
}

// The problem in cuBLAS's column-major terms (see the header).
struct Problem {
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  cudaDataType_t type = CUDA_R_16BF;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;  // cuBLAS's m, n = our n, m
  uint32_t align_a = 0, align_b = 0, align_c = 0;      // cuBLASLt's A, B, C
  void *a = nullptr, *b = nullptr, *d = nullptr, *workspace = nullptr;  // a: our B, b: our A
  float alpha = 1.0f, beta = 0.0f;
};

// One timed thing: a cuBLASLt configuration or cuBLAS.
struct Entry {
  std::string source;  // "heur#i" (heuristic rank i), "cublas", "sweep", "=heur#i" (found by both)
  bool blas = false;
  cublasLtMatmulAlgo_t algo{};
  Config config{};
  size_t workspace = 0;
  float screen_ms = -1, final_ms = -1;
};

cublasStatus_t run(const Problem& p, const Entry& e, void* out) {
  if (e.blas) {
    return cublasGemmEx(p.blas, p.op_a, p.op_b, p.m, p.n, p.k, &p.alpha, p.a, p.type, p.lda, p.b, p.type,
                        p.ldb, &p.beta, out, p.type, p.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
  }
  return cublasLtMatmul(p.lt, p.desc, &p.alpha, p.a, p.la, p.b, p.lb, &p.beta, out, p.lc, out, p.lc, &e.algo,
                        p.workspace, kWorkspaceBytes, p.stream);
}

// Per-call ms of each entry in each of `rounds` rounds (one batch of `reps` calls of every
// entry in turn) after kWarmups untimed calls of each, which keep the GPU busy while the timed
// calls are queued. An entry whose call failed gets {}.
std::vector<std::vector<float>> time_rounds(const Problem& p, const std::vector<Entry*>& entries,
                                            int rounds, int reps) {
  const size_t count = entries.size();
  std::vector<bool> ok(count, true);
  for (size_t i = 0; i < count; ++i) {
    for (int w = 0; w < kWarmups && ok[i]; ++w) ok[i] = run(p, *entries[i], p.d) == CUBLAS_STATUS_SUCCESS;
  }
  std::vector<cudaEvent_t> ev(rounds * count + 1);
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  CUDA_CHECK(cudaEventRecord(ev[0], p.stream));
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < count; ++i) {
      for (int c = 0; c < reps && ok[i]; ++c) ok[i] = run(p, *entries[i], p.d) == CUBLAS_STATUS_SUCCESS;
      CUDA_CHECK(cudaEventRecord(ev[r * count + i + 1], p.stream));
    }
  }
  CUDA_CHECK(cudaEventSynchronize(ev.back()));
  std::vector<std::vector<float>> ms(count);
  for (size_t i = 0; i < count; ++i) {
    for (int r = 0; r < rounds && ok[i]; ++r) {
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, ev[r * count + i], ev[r * count + i + 1]));
      ms[i].push_back(t / reps);
    }
  }
  for (cudaEvent_t e : ev) CUDA_CHECK(cudaEventDestroy(e));
  return ms;
}

float median(std::vector<float> v) {  // -1 for none
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5f * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Screen: median of kScreenBatches batches, or the first alone when it is over prune_ms (> 0).
float screen(const Problem& p, Entry& e, int reps, float prune_ms) {
  std::vector<float> ms = time_rounds(p, {&e}, 1, reps)[0];
  if (ms.empty() || (prune_ms > 0 && ms[0] > prune_ms)) return median(ms);
  const std::vector<float> more = time_rounds(p, {&e}, kScreenBatches - 1, reps)[0];
  ms.insert(ms.end(), more.begin(), more.end());
  return more.empty() ? -1 : median(ms);
}

// A capability's id list; {0} ("undefined") when it has none.
std::vector<uint32_t> cap_ids(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  std::vector<uint32_t> v;
  if (cublasLtMatmulAlgoCapGetAttribute(&a, attr, nullptr, 0, &bytes) == CUBLAS_STATUS_SUCCESS && bytes) {
    v.resize(bytes / sizeof(uint32_t));
    if (cublasLtMatmulAlgoCapGetAttribute(&a, attr, v.data(), bytes, &bytes) != CUBLAS_STATUS_SUCCESS) v.clear();
  }
  return v.empty() ? std::vector<uint32_t>{0} : v;
}

template <typename T>
T cap(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  T v{};
  size_t written = 0;
  return cublasLtMatmulAlgoCapGetAttribute(&a, attr, &v, sizeof(v), &written) == CUBLAS_STATUS_SUCCESS ? v : T{};
}

struct Enumeration {
  std::vector<Entry> valid;
  int64_t algo_ids = 0, possible = 0, checks = 0, rejected = 0, over_workspace = 0;
};

// Configurations cublasLtMatmulAlgoCheck accepts within our workspace, in search order: groups
// (algo, tile, cluster, split-K, custom option 0 or the others) by rank, each group's stages x
// swizzle x custom options in turn. Rank: split-K 1 before 2; tiles 128x256, 256x128 and the
// heuristic's, then other named tiles of >= 128x128, unnamed (newer) ids, smaller tiles;
// clusters 2x1, 1x2, 2x2 and the heuristic's, then 1x1 and auto, then 4x1 and 1x4; custom
// option 0 before the others.
Enumeration enumerate(const Problem& p, const Flags& f, const std::vector<Config>& heur) {
  Enumeration out;
  std::vector<int> ids(4096);
  int n_ids = 0;
  const cudaDataType_t t = p.type;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetIds(p.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, t, t, t, t, 4096, ids.data(), &n_ids));
  out.algo_ids = n_ids;
  // No capability lists cluster shapes (CUDA 13.0's cublasLt.h has none): Check rejects the unsupported.
  std::vector<uint16_t> clusters = {CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                    CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                    CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_4x1x1,
                                    CUBLASLT_CLUSTER_SHAPE_1x4x1};
  for (const Config& h : heur) {
    if (std::find(clusters.begin(), clusters.end(), h.cluster) == clusters.end()) clusters.push_back(h.cluster);
  }
  auto heur_has = [&](auto member, uint32_t v) {
    return std::any_of(heur.begin(), heur.end(), [&](const Config& h) { return h.*member == v; });
  };
  auto tile_rank = [&](uint32_t tile) {
    if (tile == CUBLASLT_MATMUL_TILE_128x256 || tile == CUBLASLT_MATMUL_TILE_256x128) return 0;
    if (heur_has(&Config::tile, tile)) return 0;
    int r = 0, c = 0;
    if (tile == 0 || tile >= std::size(kTiles) || std::sscanf(kTiles[tile], "%dx%d", &r, &c) != 2) return 2;
    return r * c >= 128 * 128 ? 1 : 3;
  };
  auto cluster_rank = [&](uint16_t c) {
    if (c == CUBLASLT_CLUSTER_SHAPE_2x1x1 || c == CUBLASLT_CLUSTER_SHAPE_1x2x1) return 0;
    if (c == CUBLASLT_CLUSTER_SHAPE_2x2x1 || heur_has(&Config::cluster, c)) return 0;
    return c == CUBLASLT_CLUSTER_SHAPE_1x1x1 || c == CUBLASLT_CLUSTER_SHAPE_AUTO ? 1 : 2;
  };
  struct Group {
    std::tuple<int, int, int, int> rank;
    cublasLtMatmulAlgo_t algo;
    Config config;  // all but stages and swizzle; custom: the first
    std::vector<uint32_t> stages;
    uint32_t swizzle_max, custom_last;
  };
  std::vector<Group> groups;
  for (int i = 0; i < n_ids; ++i) {
    Group g{};
    g.config.id = ids[i];
    if (cublasLtMatmulAlgoInit(p.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, t, t, t, t, ids[i], &g.algo)) continue;
    g.stages = cap_ids(g.algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
    g.swizzle_max = cap<uint32_t>(g.algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) ? 1 : 0;
    const int32_t custom_max = std::max(0, cap<int32_t>(g.algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX));
    const uint32_t mask = cap<uint32_t>(g.algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
    const uint32_t reduction = mask & (~mask + 1);  // the lowest supported scheme, for split-K 2
    const int splits = cap<int32_t>(g.algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) && reduction ? 2 : 1;
    for (uint32_t tile : cap_ids(g.algo, CUBLASLT_ALGO_CAP_TILE_IDS)) {
      for (uint16_t cluster : clusters) {
        for (int split = 1; split <= splits; ++split) {
          for (uint32_t first : {0u, 1u}) {
            if (static_cast<int32_t>(first) > custom_max) continue;
            g.config.tile = tile, g.config.cluster = cluster, g.config.splitk = split, g.config.custom = first;
            g.config.reduction = split == 1 ? 0 : reduction;
            g.custom_last = first == 0 ? 0 : custom_max;
            g.rank = {split, tile_rank(tile), cluster_rank(cluster), first};
            out.possible += static_cast<int64_t>(g.stages.size()) * (g.swizzle_max + 1) * (g.custom_last + 1 - first);
            groups.push_back(g);
          }
        }
      }
    }
  }
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.rank < b.rank; });
  for (const Group& g : groups) {
    for (uint32_t stages : g.stages) {
      for (uint32_t swizzle = 0; swizzle <= g.swizzle_max; ++swizzle) {
        for (uint32_t custom = g.config.custom; custom <= g.custom_last; ++custom) {
          if (static_cast<int64_t>(out.valid.size()) >= f.max_configs || out.checks >= f.max_checks) return out;
          Entry e{.source = "sweep", .algo = g.algo, .config = g.config};
          e.config.stages = stages, e.config.swizzle = swizzle, e.config.custom = custom;
          cublasLtMatmulHeuristicResult_t r{};
          ++out.checks;
          if (!apply_config(e.algo, e.config) ||
              cublasLtMatmulAlgoCheck(p.lt, p.desc, p.la, p.lb, p.lc, p.lc, &e.algo, &r) != CUBLAS_STATUS_SUCCESS) {
            ++out.rejected;
          } else if (r.workspaceSize > kWorkspaceBytes) {
            ++out.over_workspace;
          } else {
            e.workspace = r.workspaceSize;
            out.valid.push_back(e);
          }
        }
      }
    }
  }
  return out;
}

// A device buffer of `count` 16-bit values uniform in [-1, 1) (gemm_bench's LCG).
void* random_device(int64_t count, bool bf16, uint64_t seed) {
  std::vector<uint16_t> host(count);
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (uint16_t& h : host) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const float v = static_cast<float>((x >> 40) * (1.0 / 8388608.0)) - 1.0f;
    h = bf16 ? colossal::kernels::float_to_bfloat16(v).bits : colossal::kernels::float_to_half(v).bits;
  }
  void* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, count * 2));
  CUDA_CHECK(cudaMemcpy(d, host.data(), count * 2, cudaMemcpyHostToDevice));
  return d;
}

Problem make_problem(const Flags& f) {
  Problem p;
  const bool bf16 = f.dtype == "bf16";
  p.type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  CUBLAS_CHECK(cublasLtCreate(&p.lt));
  CUBLAS_CHECK(cublasCreate(&p.blas));
  CUDA_CHECK(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMalloc(&p.workspace, kWorkspaceBytes));
  CUBLAS_CHECK(cublasSetStream(p.blas, p.stream));
  CUBLAS_CHECK(cublasSetWorkspace(p.blas, p.workspace, kWorkspaceBytes));  // after the stream, as core does
  p.b = random_device(f.m * f.k, bf16, 1);  // our A
  p.a = random_device(f.k * f.n, bf16, 2);  // our B
  CUDA_CHECK(cudaMalloc(&p.d, f.m * f.n * 2));
  // The column-major mapping and the alignments core/gemm uses for this problem.
  colossal::core::gemm::internal::GemmProblem g;
  g.m = f.m, g.n = f.n, g.k = f.k, g.trans_b = f.trans_b != 0;
  g.dtype = bf16 ? colossal::core::DType::kBF16 : colossal::core::DType::kF16;
  g.a = p.b, g.b = p.a, g.c = p.d;
  const auto args = colossal::core::gemm::internal::cublas_args(g);
  const auto key = colossal::core::gemm::internal::matmul_algo_key(g);
  p.op_a = static_cast<cublasOperation_t>(args.op_a);
  p.op_b = static_cast<cublasOperation_t>(args.op_b);
  p.m = static_cast<int>(args.m), p.n = static_cast<int>(args.n), p.k = static_cast<int>(args.k);
  p.lda = static_cast<int>(args.lda), p.ldb = static_cast<int>(args.ldb);
  p.ldc = static_cast<int>(args.ldc);
  p.align_a = key.align_a, p.align_b = key.align_b, p.align_c = key.align_c;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t op_a = p.op_a, op_b = p.op_b;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // Stored column-major: rows = the leading dimension, columns from the op.
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.la, p.type, p.lda, op_a == CUBLAS_OP_N ? p.k : p.m, p.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lb, p.type, p.ldb, op_b == CUBLAS_OP_N ? p.n : p.k, p.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lc, p.type, p.ldc, p.n, p.ldc));
  return p;
}

// The heuristic's top kHeuristicCount with core/gemm's preferences (workspace, alignments).
std::vector<Entry> heuristic(const Problem& p) {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.align_c}};
  for (const auto& [attr, v] : aligns) CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)));
  cublasLtMatmulHeuristicResult_t results[kHeuristicCount] = {};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(p.lt, p.desc, p.la, p.lb, p.lc, p.lc, pref, kHeuristicCount,
                                              results, &found));
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  std::vector<Entry> out;
  for (int i = 0; i < found; ++i) {
    const cublasLtMatmulHeuristicResult_t& r = results[i];
    if (r.state == CUBLAS_STATUS_SUCCESS) {
      out.push_back({.source = "heur#" + std::to_string(i), .algo = r.algo, .config = read_config(r.algo),
                     .workspace = r.workspaceSize});
    }
  }
  COLOSSAL_CHECK(!out.empty()) << "cublasLtMatmulAlgoGetHeuristic found nothing";
  return out;
}

double tflops(const Flags& f, float ms) { return ms > 0 ? 2.0 * f.m * f.n * f.k / (ms * 1e9) : 0.0; }

// The table, and under each cuBLASLt row its raw values: cublasLtMatmulAlgoInit(ID), then
// cublasLtMatmulAlgoConfigSetAttribute each (CLUSTER_SHAPE_ID, INNER_SHAPE_ID uint16_t;
// SPLITK_NUM int32_t; the rest uint32_t); data: the whole cublasLtMatmulAlgo_t.
void print_final(const Flags& f, const std::vector<Entry>& entries) {
  std::printf("\nfinal: median of %d interleaved batches of %lld calls\n%s\n", kFinalRounds, (long long)f.reps,
              "rank source     algo tile      stages    cluster swz cust sk/red  TFLOP/s       us  workspace");
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const Config& c = e.config;
    char what[96];
    std::snprintf(what, sizeof(what), "%5d %-9s %-9s %-7s %3u %4u %3d/%u", c.id, name(kTiles, c.tile).c_str(),
                  name(kStages, c.stages).c_str(), name(kClusters, c.cluster).c_str(), c.swizzle, c.custom,
                  c.splitk, c.reduction);
    std::printf("%4zu %-9s %-47s %7.1f %8.1f %10zu\n", i + 1, e.source.c_str(),
                e.blas ? "cublasGemmEx CUBLAS_GEMM_DEFAULT_TENSOR_OP" : what, tflops(f, e.final_ms),
                e.final_ms * 1e3f, e.workspace);
    if (e.blas) continue;
    std::printf("       ID=%d TILE_ID=%u STAGES_ID=%u CLUSTER_SHAPE_ID=%u INNER_SHAPE_ID=%u CTA_SWIZZLING=%u "
                "CUSTOM_OPTION=%u SPLITK_NUM=%d REDUCTION_SCHEME=%u data=",
                c.id, c.tile, c.stages, c.cluster, c.inner, c.swizzle, c.custom, c.splitk, c.reduction);
    for (int w = 0; w < 8; ++w) std::printf("%s0x%llx", w ? "," : "{", (unsigned long long)e.algo.data[w]);
    std::printf("}\n");
  }
}

// Runs `winner` and `ref` and prints max |winner - ref| relative to max |ref|.
void compare(const Problem& p, const Flags& f, const Entry& winner, const Entry& ref) {
  const bool bf16 = f.dtype == "bf16";
  std::vector<uint16_t> out[2];
  for (int i = 0; i < 2; ++i) {
    CUBLAS_CHECK(run(p, i == 0 ? ref : winner, p.d));
    out[i].resize(f.m * f.n);
    CUDA_CHECK(cudaMemcpyAsync(out[i].data(), p.d, f.m * f.n * 2, cudaMemcpyDeviceToHost, p.stream));
    CUDA_CHECK(cudaStreamSynchronize(p.stream));
  }
  auto value = [&](uint16_t bits) -> double {
    return bf16 ? colossal::kernels::bfloat16_to_float({bits}) : colossal::kernels::half_to_float({bits});
  };
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < out[0].size(); ++i) {
    const double r = value(out[0][i]), g = value(out[1][i]);
    max_diff = std::max(max_diff, std::isfinite(g) ? std::fabs(g - r) : INFINITY);
    max_ref = std::max(max_ref, std::fabs(r));
  }
  // One ulp of the largest value is at most 2^-7 (bf16) or 2^-10 (fp16) of it.
  const double rel = max_diff / max_ref, eps = bf16 ? 1.0 / 128 : 1.0 / 1024;
  std::printf("\nnumerics: %s vs %s: max|diff| %.4g, max|ref| %.4g, relative %.3g: %s %s rounding (%.3g)\n",
              winner.source.c_str(), ref.source.c_str(), max_diff, max_ref, rel,
              rel <= eps ? "within" : "NOT within", f.dtype.c_str(), eps);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse_flags(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gemm_algo_sweep: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, cuBLASLt %zu: %s m=%lld n=%lld k=%lld %s, workspace %zu MiB\n", prop.name, cublasLtGetVersion(),
              f.dtype.c_str(), (long long)f.m, (long long)f.n, (long long)f.k, f.trans_b ? "NT" : "NN",
              kWorkspaceBytes >> 20);
  const Problem p = make_problem(f);
  const int reps = static_cast<int>(f.reps);

  // Baselines: the heuristic's candidates and cuBLAS.
  std::vector<Entry> heur = heuristic(p);
  Entry blas{.source = "cublas", .blas = true};
  blas.screen_ms = screen(p, blas, reps, 0);
  float best_ms = blas.screen_ms > 0 ? blas.screen_ms : 1e30f;
  size_t best_heur = 0;
  std::vector<Config> heur_configs;
  for (size_t i = 0; i < heur.size(); ++i) {
    heur_configs.push_back(heur[i].config);
    heur[i].screen_ms = screen(p, heur[i], reps, 0);
    if (heur[i].screen_ms < 0) continue;
    if (heur[best_heur].screen_ms < 0 || heur[i].screen_ms < heur[best_heur].screen_ms) best_heur = i;
    best_ms = std::min(best_ms, heur[i].screen_ms);
  }
  std::printf("screen: heuristic top-1 %.1f, best of %zu heuristic (%s) %.1f, cublasGemmEx %.1f TFLOP/s\n",
              tflops(f, heur[0].screen_ms), heur.size(), heur[best_heur].source.c_str(),
              tflops(f, heur[best_heur].screen_ms), tflops(f, blas.screen_ms));

  // Enumerate, then screen in search order within the time budget.
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  Clock::time_point t0 = Clock::now();
  Enumeration en = enumerate(p, f, heur_configs);
  std::printf("enumerate: %lld algo ids, %lld possible configs; %lld checked in %.1f s: %zu valid, %lld rejected by "
              "cublasLtMatmulAlgoCheck, %lld over the workspace; %lld skipped (--max_configs, --max_checks)\n",
              (long long)en.algo_ids, (long long)en.possible, (long long)en.checks, since(t0), en.valid.size(),
              (long long)en.rejected, (long long)en.over_workspace, (long long)(en.possible - en.checks));
  t0 = Clock::now();
  size_t screened = 0;
  for (; screened < en.valid.size() && since(t0) < f.screen_seconds; ++screened) {
    Entry& e = en.valid[screened];
    e.screen_ms = screen(p, e, reps, kPruneFactor * best_ms);
    if (e.screen_ms > 0) best_ms = std::min(best_ms, e.screen_ms);
    if ((screened + 1) % 250 == 0) {
      std::fprintf(stderr, "  screened %zu/%zu in %.0f s, best %.1f TFLOP/s\n", screened + 1, en.valid.size(),
                   since(t0), tflops(f, best_ms));
    }
  }
  const size_t untimed = en.valid.size() - screened;
  en.valid.resize(screened);
  const size_t failed = std::erase_if(en.valid, [](const Entry& e) { return e.screen_ms < 0; });
  std::printf("screen: %zu configs timed in %.1f s (%zu failed to run), %zu valid left untimed (--screen_seconds)\n",
              screened, since(t0), failed, untimed);

  // Final: baselines and the best --top screened configs, in interleaved rounds.
  std::stable_sort(en.valid.begin(), en.valid.end(),
                   [](const Entry& a, const Entry& b) { return a.screen_ms < b.screen_ms; });
  std::vector<Entry> final_entries = {heur[0], blas};
  if (best_heur != 0) final_entries.push_back(heur[best_heur]);
  for (size_t i = 0; i < en.valid.size() && static_cast<int64_t>(i) < f.top; ++i) {
    final_entries.push_back(en.valid[i]);
    for (const Entry& h : heur) {
      if (h.config == en.valid[i].config) final_entries.back().source = "=" + h.source;
    }
  }
  std::vector<Entry*> pointers;
  for (Entry& e : final_entries) pointers.push_back(&e);
  const std::vector<std::vector<float>> ms = time_rounds(p, pointers, kFinalRounds, reps);
  for (size_t i = 0; i < final_entries.size(); ++i) final_entries[i].final_ms = median(ms[i]);
  std::stable_sort(final_entries.begin(), final_entries.end(), [](const Entry& a, const Entry& b) {
    return (a.final_ms > 0) != (b.final_ms > 0) ? a.final_ms > 0 : a.final_ms < b.final_ms;
  });
  print_final(f, final_entries);
  compare(p, f, final_entries[0], heur[0]);
  return 0;
}

#endif  // COLOSSAL_WITH_CUDA
