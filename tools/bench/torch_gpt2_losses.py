"""PyTorch's first training steps of a GPT-2-shaped model: the loss and gradient norm of each step.

For a side-by-side of training dynamics with colossal's recipes (tools/bench/gemini.sh
dynamics): the same shape, GPT-2 init, optimizer, clipping, learning-rate schedule and
corpus; different draws of the data. The model is tools/bench/torch_gpt2_train.py's
(pre-LN blocks, tied LM head, vocabulary padded to 50304, GPT-2 init, sdpa attention).

- Optimizer: AdamW(fused=True), betas (0.9, 0.95), eps 1e-8, weight decay on 2-D weights
  only; clip_grad_norm_(max_norm) every step (the norm printed is the one before clipping).
- Learning rate at step s (0-based), colossal's cosine schedule with linear warm-up:
  lr (s + 1) / warmup while s < warmup, then cosine from lr to eta_min at total.
- Precision: bf16 is torch.autocast(bfloat16) over fp32 weights (the weights, gradients and
  AdamW states are fp32); fp32 runs with TF32 off. --max_norm 0 skips clipping (the norm is
  still printed); --checkpoint recomputes every block's activations in backward.
- Data: llm.c token shards (a header of 256 int32: magic 20240520, version 1, token count;
  then uint16 ids), the ones colossal writes for the shakespeare corpus under
  data/shakespeare/ on the first run of a recipe with corpus = "shakespeare". Each step
  draws micro_batch windows of seq + 1 tokens at uniform random starts (--seed).

Prints `step i/n | loss L | norm N | lr X` per step, then one JSON object. On the GPU
machine, from the repository root, after a colossal run prepared the shards:
    python3 tools/bench/torch_gpt2_losses.py --n_layer 8 --n_head 32 --n_embd 4096 \\
        --micro_batch 4 --steps 8
"""

import argparse
import glob
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import torch_gpt2_train as ref  # noqa: E402

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256


def read_tokens(pattern):
    """The uint16 tokens of every shard matching `pattern`, concatenated in path order."""
    paths = sorted(glob.glob(pattern))
    if not paths:
        sys.exit(f"torch_gpt2_losses: no shard matches {pattern!r} (run a colossal recipe first)")
    parts = []
    for path in paths:
        header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
        if len(header) < HEADER_INTS or header[0] != MAGIC or header[1] != VERSION:
            sys.exit(f"torch_gpt2_losses: {path} is not a version-1 llm.c shard")
        n = int(header[2])
        if os.path.getsize(path) != 4 * HEADER_INTS + 2 * n:
            sys.exit(f"torch_gpt2_losses: {path}: size disagrees with its header ({n} tokens)")
        parts.append(np.fromfile(path, dtype="<u2", offset=4 * HEADER_INTS))
    return np.concatenate(parts)


def lr_at(a, step):
    if step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    if step >= a.total_steps:
        return a.eta_min
    progress = (step - a.warmup_steps) / (a.total_steps - a.warmup_steps)
    return a.eta_min + (a.lr - a.eta_min) * 0.5 * (1.0 + math.cos(math.pi * progress))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in [("n_layer", 8), ("n_head", 32), ("n_embd", 4096), ("micro_batch", 4),
                          ("seq", 1024), ("steps", 8), ("warmup_steps", 100), ("total_steps", 2000),
                          ("seed", 1337)]:
        p.add_argument(f"--{name}", type=int, default=default)
    for name, default in [("lr", 3e-4), ("eta_min", 3e-5), ("weight_decay", 0.1), ("max_norm", 1.0)]:
        p.add_argument(f"--{name}", type=float, default=default)
    p.add_argument("--shards", default="data/shakespeare/shakespeare_train_*.bin")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--checkpoint", action="store_true", help="activation checkpointing of every block")
    a = p.parse_args()

    tokens = read_tokens(a.shards)
    if len(tokens) < a.seq + 1:
        sys.exit(f"torch_gpt2_losses: {len(tokens)} tokens in {a.shards!r}, fewer than seq + 1 = {a.seq + 1}")
    # fp32 means true fp32 GEMMs (ours); under bf16 autocast the matmuls are bf16 either way.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    model = ref.GPT2(a.seq, sdpa=True, n_layer=a.n_layer, n_head=a.n_head, n_embd=a.n_embd).cuda()
    if a.checkpoint:
        model.h = torch.nn.ModuleList(ref.Checkpointed(b) for b in model.h)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    rng = np.random.default_rng(a.seed)
    losses, norms = [], []
    for step in range(a.steps):
        # Starts in [0, N - seq - 1] inclusive: the last window's target ends at the last token.
        starts = rng.integers(0, len(tokens) - a.seq - 1, size=a.micro_batch, endpoint=True)
        window = np.stack([tokens[s:s + a.seq + 1] for s in starts]).astype(np.int64)
        batch = torch.from_numpy(window).cuda()
        lr = lr_at(a, step)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        # The pre-clip total norm; max_norm 0 means no clipping (an infinite bound scales by 1).
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_norm or math.inf).item()
        opt.step()
        losses.append(loss.item())
        norms.append(norm)
        print(f"step {step + 1}/{a.steps} | loss {losses[-1]:.4f} | norm {norm:.4f} | lr {lr:.3e}", flush=True)
    print(json.dumps({"impl": "torch", "n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd,
                      "params": sum(q.numel() for q in model.parameters()), "micro_batch": a.micro_batch,
                      "seq": a.seq, "precision": a.precision, "lr": a.lr, "warmup_steps": a.warmup_steps,
                      "losses": losses, "norms": norms}))


if __name__ == "__main__":
    main()
