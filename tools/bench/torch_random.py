"""PyTorch reference for kernels/random: normal and uniform fills on the GPU.

Same sizes, dtypes and byte count (n * element size: the output is written
once) as //kernels/random:random_bench's BM_RandomCuda, timed with CUDA events
(median of 50 after 10 warm-ups): t.normal_(0, 0.02) and t.uniform_(-1, 1) on a
preallocated tensor (Philox in PyTorch too). Run on the GPU machine:
    python3 tools/bench/torch_random.py
"""

import torch
from bench_timing import cuda_ms as time_ms

N64MI = 1 << 26
WTE = 50257 * 768  # GPT-2 small token embedding
MLP = 768 * 3072   # GPT-2 small MLP weight


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<22} {'case':<28} {'GB/s':>8}")
    cases = [("normal", n) for n in (N64MI, WTE, MLP)] + [("uniform", N64MI)]
    for dist, n in cases:
        for dtype in (torch.float32, torch.bfloat16):
            t = torch.empty(n, device="cuda", dtype=dtype)
            if dist == "normal":
                fn, op = (lambda: t.normal_(0.0, 0.02)), "t.normal_(0, 0.02)"
            else:
                fn, op = (lambda: t.uniform_(-1.0, 1.0)), "t.uniform_(-1, 1)"
            ms = time_ms(fn)
            print(f"{op:<22} {str(dtype)[6:] + ' n=' + str(n):<28} {n * t.element_size() / (ms * 1e-3) / 1e9:>8.1f}")


if __name__ == "__main__":
    main()
