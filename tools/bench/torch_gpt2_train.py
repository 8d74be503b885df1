"""PyTorch reference for //nn/bench/gpt2_train:gpt2_train_bench: one GPT-2 (124M) training step.

The model is written out below: Hugging Face GPT-2's architecture (pre-LN blocks,
LayerNorm eps 1e-5, tanh GELU, no dropout), LM head tied to wte, vocabulary padded
to 50304 rows (the loss uses the 50257 real columns, as ours), GPT-2's init. Linear
weights are torch's [out, in] rather than HF Conv1D's [in, out]: the same GEMMs,
transposed operands. Batch 16 x 1024 random tokens.

One step, as the C++ benchmark's: zero_grad(set_to_none), forward, cross-entropy,
backward, clip_grad_norm_(1.0), AdamW(fused=True, lr 6e-4, betas (0.9, 0.95),
eps 1e-8, weight decay 0.1 on 2-D weights and 0 on biases/LayerNorm). Unlike
ours, the step never waits for the host (no loss or norm read back).

Variants (--variants picks some; all by default, eager first):
  eager-explicit    torch.autocast(bfloat16) eager; attention as ours: the T x T
                    scores, mask, softmax and probabilities materialised
  eager-sdpa        the same with F.scaled_dot_product_attention(is_causal=True)
                    (a fused flash-attention kernel: nothing T x T is stored)
  compile-explicit  torch.compile (default mode) of the eager-explicit model
  compile-sdpa      torch.compile of the eager-sdpa model
  fp32-explicit     no autocast, fp32 throughout, TF32 off (our fp32 case)
What autocast(bfloat16) does here: weights, gradients and Adam states stay fp32
(so there is no separate master copy; AdamW updates the fp32 weights); each
forward casts the weights to bf16 for the matmuls (Linear, q k^T, p v, the LM
head), which run on bf16 tensor cores with fp32 accumulation and bf16 outputs;
layer_norm, softmax and cross_entropy run in fp32 (autocast's fp32 list), GELU
in its input's dtype (bf16), residual adds in fp32 (bf16 + fp32 promotes).
Ours (bf16 case) keeps the weights, activations and gradients in bf16 with fp32
masters in the optimizer, so its memory is not directly comparable.

Counters as the C++ benchmark's: ms/step is the CUDA-event median of 10 steps
after 3 warm-ups (bench_timing.cuda_ms); tokens/s = B*T / step; MFU against
989 TFLOP/s (H100 SXM dense bf16) with flops = (6 N + 12 L C T) B T, N the
parameters without wpe; peak memory is torch.cuda.max_memory_allocated over the
timed steps (weights, gradients, Adam states, activations). Run on the GPU machine:
    python3 tools/bench/torch_gpt2_train.py [--variants eager-sdpa,compile-sdpa]
"""

import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint
from bench_timing import cuda_ms

L, NH, C, V, VP = 12, 12, 768, 50257, 50304
PEAK_FLOPS = 989e12
VARIANTS = ["eager-explicit", "eager-sdpa", "fp32-explicit", "compile-explicit", "compile-sdpa"]


class Block(nn.Module):
    def __init__(self, sdpa, n_head=NH, n_embd=C):
        super().__init__()
        self.sdpa, self.n_head, self.n_embd = sdpa, n_head, n_embd
        C = n_embd
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, _ = x.shape
        C, NH = self.n_embd, self.n_head
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in backward (activation checkpointing)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)

class GPT2(nn.Module):
    # n_layer/n_head/n_embd default to GPT-2 124M (the module constants); other sizes:
    # tools/bench/torch_gpt2_dist.py (GPT-2 XL: 48, 25, 1600).
    def __init__(self, T, sdpa, n_layer=L, n_head=NH, n_embd=C):
        super().__init__()
        C = n_embd
        self.wte, self.wpe = nn.Embedding(VP, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(sdpa, n_head, n_embd) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():  # GPT-2 init
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)
        with torch.no_grad():
            self.wte.weight[V:].zero_()

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def run(variant, B, T):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = GPT2(T, sdpa=variant.endswith("sdpa")).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if variant.startswith("compile") else model
    idx = torch.randint(0, V, (B, T), device="cuda")
    targets = torch.randint(0, V, (B, T), device="cuda")
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not variant.startswith("fp32")):
            loss = fwd(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())

    for _ in range(3):  # warm-up (compilation) before the peak-memory window
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ms = cuda_ms(step, warmup=0, reps=10)
    peak = torch.cuda.max_memory_allocated() / 2**30
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    flops = (6 * n + 12 * L * C * T) * B * T
    print(f"{variant:<18} {ms:>9.2f} {B * T / (ms * 1e-3):>11.0f} {flops / (ms * 1e-3) / 1e12:>8.1f} "
          f"{100 * flops / (ms * 1e-3) / PEAK_FLOPS:>6.1f} {peak:>9.2f} {losses[-1].item():>8.4f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS}")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=1024)
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {VARIANTS}")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: GPT-2 124M train step, "
          f"B={args.batch} T={args.seq}, vocab {V} padded to {VP}")
    print(f"{'variant':<18} {'ms/step':>9} {'tokens/s':>11} {'TFLOP/s':>8} {'MFU%':>6} {'peak GiB':>9} {'loss':>8}")
    failed = 0
    for variant in variants:
        try:
            run(variant, args.batch, args.seq)
        except Exception as e:  # one variant failing (out of memory, compiler) should not hide the others
            print(f"{variant:<18} FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
            failed += 1
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
