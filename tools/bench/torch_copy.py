"""PyTorch reference for //tools/bench:copy_bench: device-to-device copy GB/s
(bytes read + bytes written, decimal), CUDA events, median of 50 after 10 warm-ups.
    python3 tools/bench/torch_copy.py
"""
import statistics

import torch


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for mib in (256, 1024, 4096):
        n = mib << 20
        src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
        dst = torch.empty_like(src)
        for _ in range(10):
            dst.copy_(src)
        times = []
        for _ in range(50):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        ms = statistics.median(times)
        print(f"torch copy_ {mib:>5} MiB {2 * n / (ms * 1e-3) / 1e9:8.1f} GB/s")


if __name__ == "__main__":
    main()
