#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/half_cuda_probe.h"

namespace colossal::kernels::testing {
namespace {

__global__ void from16_kernel(uint32_t* half_out, uint32_t* bf16_out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536) return;
  const uint16_t bits = static_cast<uint16_t>(i);
  half_out[i] = __float_as_uint(__half2float(__ushort_as_half(bits)));
  bf16_out[i] = __float_as_uint(__bfloat162float(__ushort_as_bfloat16(bits)));
}

__global__ void to16_kernel(const uint32_t* in, int64_t n, uint16_t* half_out, uint16_t* bf16_out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float f = __uint_as_float(in[i]);
  half_out[i] = __half_as_ushort(__float2half_rn(f));
  bf16_out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

}  // namespace

bool run_device_conversions(const std::vector<uint32_t>& inputs, DeviceConversions* out) {
  const int64_t n = static_cast<int64_t>(inputs.size());
  uint32_t *d_h = nullptr, *d_b = nullptr, *d_in = nullptr;
  uint16_t *d_th = nullptr, *d_tb = nullptr;
  bool ok = cudaMalloc(&d_h, 65536 * 4) == cudaSuccess && cudaMalloc(&d_b, 65536 * 4) == cudaSuccess &&
            cudaMalloc(&d_in, n * 4) == cudaSuccess && cudaMalloc(&d_th, n * 2) == cudaSuccess &&
            cudaMalloc(&d_tb, n * 2) == cudaSuccess;
  DeviceConversions result;
  if (ok) {
    ok = cudaMemcpy(d_in, inputs.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess;
    from16_kernel<<<65536 / 256, 256>>>(d_h, d_b);
    to16_kernel<<<(n + 255) / 256, 256>>>(d_in, n, d_th, d_tb);
    ok = ok && cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
    result.half_to_float.resize(65536);
    result.bfloat16_to_float.resize(65536);
    result.float_to_half.resize(n);
    result.float_to_bfloat16.resize(n);
    ok = ok && cudaMemcpy(result.half_to_float.data(), d_h, 65536 * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
    ok = ok && cudaMemcpy(result.bfloat16_to_float.data(), d_b, 65536 * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
    ok = ok && cudaMemcpy(result.float_to_half.data(), d_th, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess;
    ok = ok && cudaMemcpy(result.float_to_bfloat16.data(), d_tb, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess;
  }
  cudaFree(d_h);
  cudaFree(d_b);
  cudaFree(d_in);
  cudaFree(d_th);
  cudaFree(d_tb);
  if (ok) *out = std::move(result);
  return ok;
}

}  // namespace colossal::kernels::testing
