"""Timing helpers shared by the PyTorch reference scripts (tools/bench/torch_*.py).

cuda_ms times with CUDA events around each call and returns the median; cpu_ms
uses the host clock. Both warm up first so one-time costs stay out.
"""
import statistics
import time

import torch


def cuda_ms(fn, warmup=10, reps=50):
    """Median milliseconds of fn() on the current CUDA stream."""
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


def cpu_ms(fn, warmup=2, reps=10):
    """Median milliseconds of fn() on the host."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def gpt2_sizes():
    """Element counts of GPT-2 124M's parameter tensors, in model order (148 tensors)."""
    C, V, T = 768, 50257, 1024
    sizes = [V * C, T * C]
    for _ in range(12):
        sizes += [C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * 4 * C, 4 * C, 4 * C * C, C]
    return sizes + [C, C]
