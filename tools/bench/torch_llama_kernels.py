"""PyTorch references for the Llama kernels (issue #17), at the shapes of
kernels/rope:rope_bench, kernels/activation:activation_bench (SwiGLU) and
kernels/attention:attention_bench (grouped-query cases), bf16 on one GPU:

  rope     transformers' apply_rotary_pos_emb (rotate_half) on q [B, H, T, D] and
           k [B, KV, T, D] plus the torch.cat that packs q|k|v as ours writes it;
           forward, and backward through autograd; B 8, T 2048, H 32, KV 8, D 64/128.
           GB/s counts the bytes ours moves (2 x packed q|k|v), so the two compare.
  swiglu   F.silu(gate) * up on [8192, 8192]; forward (3 n e bytes) and backward
           (5 n e) as ours counts them.
  gqa      F.scaled_dot_product_attention(is_causal=True, enable_gqa=True) on
           q [B, 32, T, D], k, v [B, 8, T, D]: forward and forward+backward ms.
Each: eager, and torch.compile where it fuses (rope, swiglu). CUDA-event medians.

    python3 tools/bench/torch_llama_kernels.py
"""
import sys

import torch
import torch.nn.functional as F
from bench_timing import cuda_ms

dev, bf16 = "cuda", torch.bfloat16


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_pack(q, k, v, cos, sin):
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    return torch.cat((q, k, v), dim=1)  # [B, H + 2 KV, T, D]


def bench_rope(D, compiled):
    B, T, H, KV = 8, 2048, 32, 8
    q = torch.randn(B, H, T, D, device=dev, dtype=bf16, requires_grad=True)
    k = torch.randn(B, KV, T, D, device=dev, dtype=bf16, requires_grad=True)
    v = torch.randn(B, KV, T, D, device=dev, dtype=bf16, requires_grad=True)
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=dev).float() / D))
    freqs = torch.outer(torch.arange(T, device=dev).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(bf16), emb.sin().to(bf16)
    fn = torch.compile(rope_pack) if compiled else rope_pack
    out = fn(q, k, v, cos, sin)
    grad = torch.randn_like(out)
    nbytes = 2 * B * T * (H + 2 * KV) * D * 2
    fwd = cuda_ms(lambda: fn(q, k, v, cos, sin))
    bwd = cuda_ms(lambda: torch.autograd.grad(fn(q, k, v, cos, sin), (q, k, v), grad)) - fwd
    return nbytes / fwd / 1e6, nbytes / max(bwd, 1e-6) / 1e6


def swiglu(g, u):
    return F.silu(g) * u


def bench_swiglu(compiled):
    n = 8192 * 8192
    g = torch.randn(8192, 8192, device=dev, dtype=bf16, requires_grad=True)
    u = torch.randn(8192, 8192, device=dev, dtype=bf16, requires_grad=True)
    fn = torch.compile(swiglu) if compiled else swiglu
    out = fn(g, u)
    grad = torch.randn_like(out)
    fwd = cuda_ms(lambda: fn(g, u))
    total = cuda_ms(lambda: torch.autograd.grad(fn(g, u), (g, u), grad))
    return 3 * n * 2 / fwd / 1e6, 5 * n * 2 / max(total - fwd, 1e-6) / 1e6


def bench_gqa(B, T, D):
    H, KV = 32, 8
    q = torch.randn(B, H, T, D, device=dev, dtype=bf16, requires_grad=True)
    k = torch.randn(B, KV, T, D, device=dev, dtype=bf16, requires_grad=True)
    v = torch.randn(B, KV, T, D, device=dev, dtype=bf16, requires_grad=True)
    f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out = f()
    grad = torch.randn_like(out)
    fwd = cuda_ms(f)
    both = cuda_ms(lambda: torch.autograd.grad(f(), (q, k, v), grad))
    return fwd, both


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for D in (64, 128):
        for compiled in (False, True):
            f, b = bench_rope(D, compiled)
            print(f"torch rope D{D} {'compile' if compiled else 'eager'}: fwd {f:.0f} GB/s, bwd {b:.0f} GB/s")
    for compiled in (False, True):
        f, b = bench_swiglu(compiled)
        print(f"torch swiglu 8192x8192 {'compile' if compiled else 'eager'}: fwd {f:.0f} GB/s, bwd {b:.0f} GB/s")
    for B, T, D in ((4, 2048, 64), (4, 2048, 128)):
        f, both = bench_gqa(B, T, D)
        print(f"torch sdpa gqa B{B} H32/8 T{T} D{D}: fwd {f:.3f} ms, fwd+bwd {both:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
