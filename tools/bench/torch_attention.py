"""PyTorch reference for kernels/attention: causal F.scaled_dot_product_attention.

Same shapes, dtypes and FLOP counts as //kernels/attention:attention_bench
(B, H, KV, T, D) = (16, 12, 12, 1024, 64) [GPT-2 124M, issue #6], (8, 12, 12, 2048, 64),
(4, 16, 16, 2048, 128), Llama-3.2-1B's grouped-query heads (4, 32, 8, 2048, 64) and the same
at D 128, and long sequences at D 128 with GQA 32/8 (T 4096, 8192, 16384; B x T = 16384),
H query heads over KV key/value heads; causal FLOPs as FlashAttention counts them:
    fwd:     4 * B * H * T^2 * D / 2
    fwd+bwd: 3.5 x fwd
q, k, v are strided views of one packed qkv [B, T, (H + 2 KV) D] tensor (what GPT-2's
c_attn produces; no copies), the output is transposed back to [B, T, H D] as a
model would; grouped heads go through sdpa's enable_gqa. "sdpa" lines let PyTorch
pick its backend (cuDNN on an H100); "sdpa-flash" and "sdpa-cudnn" force the
FlashAttention and cuDNN backends; "explicit" lines time the
unfused softmax((q k^T) * scale, causal) v that nn's explicit path mirrors.
fwd+bwd is one forward plus torch.autograd.grad w.r.t. qkv. Timed with CUDA
events (tools/bench/bench_timing.cuda_ms: median of 50 after 10 warm-ups).
Run on the GPU machine (--bf16: bfloat16 only):
    python3 tools/bench/torch_attention.py [--bf16]
"""
import math
import sys

import torch
import torch.nn.functional as F

from bench_timing import cuda_ms

# Full-mask (no causal mask) rows, FLOPs twice the causal count ("-full" ops), and a head dim
# of 96: as the benchmark's.
FULL_SHAPES = [(4, 16, 16, 2048, 128)]
D96_SHAPES = [(4, 16, 16, 2048, 96)]
SHAPES = [(16, 12, 12, 1024, 64), (8, 12, 12, 2048, 64), (4, 16, 16, 2048, 128),
          (4, 32, 8, 2048, 64), (4, 32, 8, 2048, 128),
          (4, 32, 8, 4096, 128), (2, 32, 8, 8192, 128), (1, 32, 8, 16384, 128)]
DTYPES = [torch.bfloat16, torch.float16]


def fwd_flops(b, h, kv, t, d):
    return 4.0 * b * h * t * t * d / 2.0


def split(qkv, b, t, h, kv, d):
    q, k, v = qkv.split([h * d, kv * d, kv * d], dim=2)
    return [x.view(b, t, -1, d).transpose(1, 2) for x in (q, k, v)]  # [B, heads, T, D] views


def sdpa(qkv, b, t, h, kv, d, causal=True):
    q, k, v = split(qkv, b, t, h, kv, d)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=kv != h)
    return y.transpose(1, 2).reshape(b, t, h * d)


def sdpa_full(qkv, b, t, h, kv, d):
    return sdpa(qkv, b, t, h, kv, d, causal=False)


def explicit(qkv, b, t, h, kv, d):
    q, k, v = split(qkv, b, t, h, kv, d)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    mask = torch.ones(t, t, device=qkv.device, dtype=torch.bool).triu(1)
    att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
    return (att @ v).transpose(1, 2).reshape(b, t, h * d)


def report(op, dtype, shape, ms, flops):
    b, h, kv, t, d = shape
    tflops = flops / (ms * 1e-3) / 1e12
    dims = f"B={b} H={h} KV={kv} T={t} D={d}"
    print(f"{op:<24} {str(dtype)[6:]:<10} {dims:<32} {ms:>9.3f} {tflops:>9.1f}")


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<24} {'dtype':<10} {'shape':<32} {'ms':>9} {'TFLOP/s':>9}")
    backends = [("sdpa", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends.append(("sdpa-flash", lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)))
        backends.append(("sdpa-cudnn", lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)))
    except ImportError:
        pass
    dtypes = DTYPES
    if "--bf16" in sys.argv:
        dtypes = [torch.bfloat16]
    runs = [(s, False) for s in SHAPES + D96_SHAPES] + [(s, True) for s in FULL_SHAPES]
    for shape, full in runs:
        b, h, kv, t, d = shape
        for dtype in dtypes:
            qkv = torch.empty(b, t, (h + 2 * kv) * d, device="cuda", dtype=dtype).uniform_(-1, 1)
            dy = torch.empty(b, t, h * d, device="cuda", dtype=dtype).uniform_(-1, 1)
            qkv_g = qkv.clone().requires_grad_(True)
            flops = fwd_flops(*shape) * (2 if full else 1)
            impls = [(name + ("-full" if full else ""), ctx, sdpa_full if full else sdpa)
                     for name, ctx in backends]
            if t <= 1024 and not full:
                impls.append(("explicit", None, explicit))
            for name, ctx, fn in impls:
                def fwd():
                    with torch.no_grad():
                        fn(qkv, b, t, h, kv, d)

                def fwd_bwd():
                    y = fn(qkv_g, b, t, h, kv, d)
                    torch.autograd.grad(y, qkv_g, dy)

                try:
                    if ctx is None:
                        ms_f, ms_fb = cuda_ms(fwd), cuda_ms(fwd_bwd)
                    else:
                        with ctx():
                            ms_f, ms_fb = cuda_ms(fwd), cuda_ms(fwd_bwd)
                except RuntimeError as e:  # backend unavailable for this shape/dtype
                    print(f"{name:<24} {str(dtype)[6:]:<10} skipped: {str(e).splitlines()[0]}")
                    continue
                report(name + " fwd", dtype, shape, ms_f, flops)
                report(name + " fwd+bwd", dtype, shape, ms_fb, 3.5 * flops)
            del qkv, dy, qkv_g
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
