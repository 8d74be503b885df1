"""PyTorch reference for kernels/elementwise: add, axpby, cast, fill on the GPU.

Same cases, dtypes and byte counts as //kernels/elementwise:elementwise_bench's
CUDA benchmarks, timed with CUDA events (median of 50 after 10 warm-ups):
    add    torch.add(a, b, out=c)             3 * n * element size
    axpby  torch.lerp(b, a, 0.9, out=c)       3 * n * element size  (= 0.9 a + 0.1 b)
    cast   x.to(dtype)                        n * (in size + out size)
    fill   c.fill_(0.5)                       n * element size
Run on the GPU machine:
    python3 tools/bench/torch_elementwise.py
"""

import torch
from bench_timing import cuda_ms as time_ms

GPT2 = 8192 * 768  # GPT-2 small activations: 8 x 1024 tokens x 768
N64MI = 1 << 26


def report(op, label, nbytes, ms):
    print(f"{op:<28} {label:<28} {nbytes / (ms * 1e-3) / 1e9:>8.1f}")


def name(dtype):
    return str(dtype)[6:]


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<28} {'case':<28} {'GB/s':>8}")
    for dtype in (torch.float32, torch.bfloat16):
        for n in (GPT2, N64MI):
            a = torch.randn(n, device="cuda", dtype=dtype)
            b = torch.randn(n, device="cuda", dtype=dtype)
            c = torch.empty_like(a)
            ms = time_ms(lambda: torch.add(a, b, out=c))
            report("torch.add(out=c)", f"{name(dtype)} n={n}", 3 * n * a.element_size(), ms)
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(N64MI, device="cuda", dtype=dtype)
        b = torch.randn(N64MI, device="cuda", dtype=dtype)
        c = torch.empty_like(a)
        ms = time_ms(lambda: torch.lerp(b, a, 0.9, out=c))
        report("torch.lerp(out=c) [axpby]", f"{name(dtype)} n={N64MI}", 3 * N64MI * a.element_size(), ms)
    for src, dst in ((torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)):
        for n in (GPT2, N64MI):
            x = torch.randn(n, device="cuda", dtype=src)
            ms = time_ms(lambda: x.to(dst))
            nbytes = n * (x.element_size() + torch.empty(0, dtype=dst).element_size())
            report(".to(dtype)", f"{name(src)}->{name(dst)} n={n}", nbytes, ms)
    for dtype in (torch.float32, torch.bfloat16):
        c = torch.empty(N64MI, device="cuda", dtype=dtype)
        ms = time_ms(lambda: c.fill_(0.5))
        report("fill_(0.5)", f"{name(dtype)} n={N64MI}", N64MI * c.element_size(), ms)


if __name__ == "__main__":
    main()
