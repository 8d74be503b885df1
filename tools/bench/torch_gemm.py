"""PyTorch reference for //core/gemm:gemm_bench (BM_GemmCuda): GEMM TFLOP/s.

Same shapes, dtypes, transposes and epilogue as the benchmark, counted the same
way (2*m*n*k per GEMM, decimal TFLOP/s), timed the same way: CUDA events around
10 back-to-back calls, median of 50 such batches after 10 warm-up batches.
Inputs are uniform random values in [-1, 1). Run on the GPU machine:
    python3 tools/bench/torch_gemm.py
"""
import statistics

import torch

REPS = 10

# (name, dtype, allow_tf32, m, n, k, trans_b, epilogue) as in gemm_bench.cc.
CASES = [
    ("bfloat16", torch.bfloat16, False, 8192, 8192, 8192, False, None),
    ("float16", torch.float16, False, 8192, 8192, 8192, False, None),
    ("float32", torch.float32, False, 4096, 4096, 4096, False, None),
    ("tf32", torch.float32, True, 4096, 4096, 4096, False, None),
    ("bfloat16", torch.bfloat16, False, 8192, 2304, 768, True, None),
    ("bfloat16", torch.bfloat16, False, 8192, 768, 3072, True, None),
    ("bfloat16", torch.bfloat16, False, 8192, 3072, 768, True, "bias+gelu"),
]


def time_per_call_ms(fn, warmup=10, batches=50):
    for _ in range(warmup * REPS):
        fn()
    times = []
    for _ in range(batches):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPS):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / REPS)
    return statistics.median(times)


def uniform(*shape, dtype):
    return torch.rand(*shape, device="cuda", dtype=torch.float32).mul_(2).sub_(1).to(dtype)


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'dtype':<10} {'m':>6} {'n':>6} {'k':>6} {'op':<3} {'epilogue':<10} {'TFLOP/s':>8}")
    for name, dtype, tf32, m, n, k, trans_b, epilogue in CASES:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = uniform(m, k, dtype=dtype)
        b = uniform(n, k, dtype=dtype).t() if trans_b else uniform(k, n, dtype=dtype)
        c = torch.empty(m, n, device="cuda", dtype=dtype)
        if epilogue == "bias+gelu":
            bias = uniform(n, dtype=dtype)
            # cuBLASLt's GELU epilogue, as PyTorch's fused addmm uses it.
            fn = lambda: torch._addmm_activation(bias, a, b, use_gelu=True)
        else:
            fn = lambda: torch.matmul(a, b, out=c)
        ms = time_per_call_ms(fn)
        tflops = 2 * m * n * k / (ms * 1e-3) / 1e12
        op = "NT" if trans_b else "NN"
        print(f"{name:<10} {m:>6} {n:>6} {k:>6} {op:<3} {epilogue or 'none':<10} {tflops:>8.1f}")
    torch.backends.cuda.matmul.allow_tf32 = False


if __name__ == "__main__":
    main()
