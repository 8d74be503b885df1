// `colossal check`: what this build has and what this machine offers, like
// `colossalai check -i`. Every line is there whatever the build; an item the
// build lacks says so instead of a version.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bazel/cuda_config.h"
#include "lua/build_info.h"
#include "lua/cli/commands.h"
#include "lua/cli/flags.h"
#include "lua/state.h"

extern "C" {
#include "cblas.h"
#include "lua.h"
}

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#if COLOSSAL_HAS_CUDNN
#include <cudnn.h>
#endif
#endif

namespace colossal::lua::cli {
namespace {

constexpr char kUsage[] =
    "usage: colossal check\n"
    "\n"
    "Prints the build configuration (CUDA on/off, GPU architectures), the CUDA\n"
    "runtime, driver, NCCL and cuDNN versions, the GPUs, Lua and OpenBLAS.\n";

void Line(absl::string_view key, absl::string_view value) {
  std::printf("%-14s %s\n", absl::StrCat(key, ":").c_str(), std::string(value).c_str());
}

#if COLOSSAL_WITH_CUDA
std::string CudaVersion(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

void CudaLines() {
  int runtime = 0, driver = 0;
  Line("CUDA runtime", cudaRuntimeGetVersion(&runtime) == cudaSuccess ? CudaVersion(runtime)
                                                                      : "unknown");
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    Line("CUDA driver", absl::StrCat(CudaVersion(driver), " (the newest CUDA it supports)"));
  } else {
    Line("CUDA driver", "none (no NVIDIA driver loaded)");
  }
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    const int major = nccl / 10000, minor = (nccl % 10000) / 100, patch = nccl % 100;
    Line("NCCL", absl::StrCat(major, ".", minor, ".", patch));
  } else {
    Line("NCCL", "linked, but ncclGetVersion failed");
  }
#if COLOSSAL_HAS_CUDNN
  const size_t cudnn = cudnnGetVersion();
  Line("cuDNN", absl::StrCat(cudnn / 10000, ".", (cudnn % 10000) / 100, ".", cudnn % 100));
#else
  Line("cuDNN", "not found in this CUDA install");
#endif
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    Line("GPUs", err != cudaSuccess ? absl::StrCat("none (", cudaGetErrorString(err), ")")
                                    : std::string("none"));
    return;
  }
  Line("GPUs", absl::StrCat(count));
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    Line(absl::StrCat("  cuda:", i),
         absl::StrFormat("%s, %.1f GiB, compute capability %d.%d", p.name,
                         p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.major, p.minor));
  }
}
#endif

}  // namespace

int CheckCommand(const Args& args) {
  auto flags = ParseFlags(args, {}, /*stop_at_positional=*/false);
  if (!flags.ok()) return FailStatus("check", flags.status(), kUsage);
  if (flags->help) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (!flags->positional.empty()) {
    return Fail("check", absl::StrCat("unexpected argument '", flags->positional[0], "'"),
                kExitUsage, kUsage);
  }
  Line("colossal", absl::StrCat(kVersion, " (", COLOSSAL_BUILD_MODE, " build)"));
#if COLOSSAL_WITH_CUDA
  Line("CUDA build", absl::StrCat("on (nvcc: ", COLOSSAL_BUILD_NVCC_VERSION, ")"));
  Line("GPU archs", COLOSSAL_BUILD_CUDA_ARCHS);
  CudaLines();
#else
  Line("CUDA build", "off (CPU-only: no CUDA toolkit was found, or --config=cpu)");
  Line("CUDA runtime", "not in this build");
  Line("CUDA driver", "not checked (CPU-only build)");
  Line("NCCL", "not in this build");
  Line("cuDNN", "not in this build");
  Line("GPUs", "not usable by this build (CPU-only)");
#endif
  Line("Lua", LUA_RELEASE);
  Line("OpenBLAS", openblas_get_config());
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace colossal::lua::cli
