"""PyTorch reference for kernels/reduce: in-place elementwise max of two buffers.

Same sizes, dtypes and byte count (3 * n * element size: read dst, read src,
write dst) as //kernels/reduce:reduce_bench's BM_ReduceCuda, timed with CUDA
events (median of 50 after 10 warm-ups). Run on the GPU machine:
    python3 tools/bench/torch_reduce.py
"""

import torch
from bench_timing import cuda_ms as time_ms


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<22} {'dtype':<10} {'n':>10} {'GB/s':>8}")
    for dtype in (torch.float32, torch.bfloat16):
        for n in (1 << 20, 1 << 26):
            dst = torch.randn(n, device="cuda", dtype=dtype)
            src = torch.randn(n, device="cuda", dtype=dtype)
            ms = time_ms(lambda: torch.maximum(dst, src, out=dst))
            gbs = 3 * n * dst.element_size() / (ms * 1e-3) / 1e9
            print(f"{'torch.maximum(out=a)':<22} {str(dtype)[6:]:<10} {n:>10} {gbs:>8.1f}")


if __name__ == "__main__":
    main()
