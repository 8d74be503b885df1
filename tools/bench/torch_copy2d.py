"""PyTorch's strided copy beside kernels/copy:copy_bench: out.copy_(src[:, :width]) on uint8
rows of `width` bytes out of rows `pitch` bytes apart, the same shapes, GB/s counting the bytes
read and written (2 x width x height), median of 50 CUDA-event-timed calls after 10 warm-ups
(bench_timing.cuda_ms).
Run on the GPU host: python3 tools/bench/torch_copy2d.py"""
import torch

from bench_timing import cuda_ms

SHAPES = [(2048, 4096, 4096), (512, 1024, 4096), (128, 1536, 65536), (2 << 20, 4 << 20, 4)]


def main():
    for width, pitch, height in SHAPES:
        src = torch.ones(height, pitch, dtype=torch.uint8, device="cuda")
        out = torch.empty(height, width, dtype=torch.uint8, device="cuda")
        view = src[:, :width]
        t = cuda_ms(lambda: out.copy_(view)) / 1e3
        print(f"torch copy_ {height} rows of {width} B: {t * 1e6:.1f} us, "
              f"{2 * width * height / t / 1e9:.0f} GB/s")


if __name__ == "__main__":
    main()
