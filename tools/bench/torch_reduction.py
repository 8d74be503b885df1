"""PyTorch reference for kernels/reduction: row sums with float32 output.

Same shapes, dtypes and byte count (rows * cols * input size + rows * 4: read
the input once, write float32 sums) as //kernels/reduction:reduction_bench's
BM_SumRowsCuda, timed with CUDA events (median of 50 after 10 warm-ups):
x.sum(dim=-1, dtype=torch.float32). Run on the GPU machine:
    python3 tools/bench/torch_reduction.py
"""
import statistics

import torch


def time_ms(fn, warmup=10, reps=50):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<34} {'case':<34} {'GB/s':>8}")
    shapes = [(1, 1 << 28), (8192, 4096), (8192, 768), (8192, 50257)]
    for dtype in (torch.float32, torch.bfloat16):
        for rows, cols in shapes:
            x = torch.rand(rows, cols, device="cuda", dtype=dtype) * 2 - 1
            ms = time_ms(lambda: x.sum(dim=-1, dtype=torch.float32))
            nbytes = rows * cols * x.element_size() + rows * 4
            case = f"{str(dtype)[6:]}->float32 [{rows},{cols}]"
            print(f"{'x.sum(dim=-1, dtype=float32)':<34} {case:<34} {nbytes / (ms * 1e-3) / 1e9:>8.1f}")
            del x


if __name__ == "__main__":
    main()
