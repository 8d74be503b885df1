"""Host memory bandwidth on the GPU machine, for reading CPU Adam's speed (Gemini's `cpu`
placement streams 28 bytes a parameter through host memory each step): a copy (read + write)
and an in-place update b += 2a (two reads, one write) over 1 GiB float32 tensors with every
core, GB/s counting the bytes each must move (best of 5). Also one thread, for the per-core rate.
Run on the GPU host: python3 tools/bench/host_bandwidth.py"""
import os
import time

import torch

N = 1 << 28  # 1 GiB of float32


def best_seconds(fn, repeats=5):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    a = torch.empty(N).uniform_()
    b = torch.empty(N).uniform_()
    for threads in (os.cpu_count(), 1):
        torch.set_num_threads(threads)
        copy = best_seconds(lambda: b.copy_(a))
        update = best_seconds(lambda: b.add_(a, alpha=2.0))
        print(f"{threads:>3} threads: copy {8 * N / copy / 1e9:6.1f} GB/s, "
              f"b += 2a {12 * N / update / 1e9:6.1f} GB/s")


if __name__ == "__main__":
    main()
