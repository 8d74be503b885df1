"""PyTorch reference for kernels/embedding: GPT-2 token + position embedding.

Same shapes (B = 8, T = 1024, C = 768, V = 50257), token ids (splitmix64(i) % V),
dtypes and byte counts as //kernels/embedding:embedding_bench:
    forward   F.embedding(tokens, wte) + wpe[:T]
              N*4 + N*C*e + T*C*e + N*C*e
    backward  torch.autograd.grad of the forward for (wte, wpe)
              N*4 + N*C*e + 2*T*C*g + 2*U*C*g   (U = distinct token ids)
N = B*T, e and g the activation and gradient element sizes (the same here:
PyTorch's gradients have the parameters' dtype). Timed with CUDA events (median
of 50 after 10 warm-ups). Run on the GPU machine:
    python3 tools/bench/torch_embedding.py
"""

import torch
import torch.nn.functional as F
from bench_timing import cuda_ms as time_ms

B, T, C, V = 8, 1024, 768, 50257
MASK = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    n = B * T
    ids = [splitmix64(i) % V for i in range(n)]
    unique = len(set(ids))
    tokens = torch.tensor(ids, dtype=torch.int32, device="cuda").view(B, T)
    print(f"B={B} T={T} C={C} V={V}, {unique} distinct token ids")
    print(f"{'op':<22} {'dtype':<10} {'us':>9} {'GB/s':>8}")
    for dtype in (torch.float32, torch.bfloat16):
        e = torch.tensor([], dtype=dtype).element_size()
        wte = torch.randn(V, C, device="cuda", dtype=dtype, requires_grad=True)
        wpe = torch.randn(T, C, device="cuda", dtype=dtype, requires_grad=True)
        dout = torch.randn(B, T, C, device="cuda", dtype=dtype)

        def forward():
            return F.embedding(tokens, wte) + wpe[:T]

        with torch.no_grad():
            ms = time_ms(forward)
        nbytes = n * 4 + n * C * e + T * C * e + n * C * e
        print(f"{'embedding forward':<22} {str(dtype)[6:]:<10} {ms * 1e3:>9.1f} {nbytes / (ms * 1e-3) / 1e9:>8.1f}")

        out = forward()
        ms = time_ms(lambda: torch.autograd.grad(out, (wte, wpe), dout, retain_graph=True))
        nbytes = n * 4 + n * C * e + 2 * T * C * e + 2 * unique * C * e
        print(f"{'embedding backward':<22} {str(dtype)[6:]:<10} {ms * 1e3:>9.1f} {nbytes / (ms * 1e-3) / 1e9:>8.1f}")


if __name__ == "__main__":
    main()
