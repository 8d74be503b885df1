"""PyTorch reference for kernels/moe at the same shape as //kernels/moe:moe_bench:
Mixtral-8x7B's routing of N = 16384 tokens (B 8 x T 2048), E = 8 experts, k = 2,
C = 4096, bfloat16. Each op is what transformers' MixtralSparseMoeBlock (and most
PyTorch MoE code) does for that step, with the same byte counts as moe_bench:
    route forward     softmax(logits.float()) -> topk -> renormalise -> bf16 weights   N (E e + 8 k)
    route backward    autograd.grad of the above for the logits                         N (2 E e + 8 k)
    dispatch          x.index_select(0, token of each expert-sorted row)                N C e (1 + k)
    combine           residual.index_add(0, token, rows * weight)                      N C e (k + 2)
    combine backward  autograd.grad of combine for (rows, weights)                     N C e (1 + 2 k)
Timed with CUDA events (median of 50 after 10 warm-ups). Run on the GPU machine:
    python3 tools/bench/torch_moe.py
"""

import torch
from bench_timing import cuda_ms as time_ms

N, E, K, C = 16384, 8, 2, 4096


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<18} {'us':>9} {'GB/s':>8}")
    e = 2
    dt = torch.bfloat16
    logits = torch.randn(N, E, device="cuda", dtype=dt)
    x = torch.randn(N, C, device="cuda", dtype=dt)
    dout = torch.randn(N, C, device="cuda", dtype=dt)

    def route(l):
        p = torch.softmax(l.float(), dim=-1)
        w, ex = torch.topk(p, K, dim=-1)
        return (w / w.sum(dim=-1, keepdim=True)), ex

    weights, experts = route(logits)
    lg = logits.clone().requires_grad_(True)
    wg, _ = route(lg)
    dw = torch.randn_like(wg)
    # Expert-sorted rows: (token, i) pairs sorted by expert, stably.
    order = torch.argsort(experts.flatten(), stable=True)
    token_of_row = (order // K).contiguous()
    rows = x.index_select(0, token_of_row)
    w_of_row = weights.flatten()[order].to(dt)
    rows_g = rows.clone().requires_grad_(True)
    w_g = w_of_row.clone().requires_grad_(True)
    out_g = x.index_add(0, token_of_row, rows_g * w_g[:, None])

    cases = [
        ("route forward", lambda: route(logits), N * (E * e + 8 * K)),
        ("route backward", lambda: torch.autograd.grad(wg, lg, dw, retain_graph=True), N * (2 * E * e + 8 * K)),
        ("dispatch", lambda: x.index_select(0, token_of_row), N * C * e * (1 + K)),
        ("combine", lambda: x.index_add(0, token_of_row, rows * w_of_row[:, None]), N * C * e * (K + 2)),
        ("combine backward", lambda: torch.autograd.grad(out_g, (rows_g, w_g), dout, retain_graph=True),
         N * C * e * (1 + 2 * K)),
    ]
    for name, fn, nbytes in cases:
        ms = time_ms(fn)
        print(f"{name:<18} {ms * 1e3:>9.1f} {nbytes / (ms * 1e-3) / 1e9:>8.1f}")


if __name__ == "__main__":
    main()
