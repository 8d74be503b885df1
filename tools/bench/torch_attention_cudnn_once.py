"""A profiling target: three causal bf16 sdpa forward + backward passes through cuDNN.

For Nsight Compute beside //kernels/attention:attention_bench (docs/benchmarks.md, session 27):
    ncu --clock-control none --set full --kernel-name regex:'(?i)bprop' --launch-skip 2 \
        --launch-count 1 python3 tools/bench/torch_attention_cudnn_once.py [T] [--full]
T (default 16384): B1 H32 KV8 D128, the benchmark's long shape; --full: the full-mask row
(B4 H16 T2048 D128, no causal mask).
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    args = [a for a in sys.argv[1:] if a != "--full"]
    full = "--full" in sys.argv[1:]
    b, h, kv, t, d = (4, 16, 16, 2048, 128) if full else (1, 32, 8, int(args[0]) if args else 16384, 128)
    torch.manual_seed(0)
    q = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, kv, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, kv, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(3):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=not full, enable_gqa=kv != h)
            torch.autograd.grad(y, (q, k, v), dy)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
