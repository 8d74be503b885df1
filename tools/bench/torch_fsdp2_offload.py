"""PyTorch reference for the gemini plugin: one GPU, FSDP2 (`fully_shard`) with CPUOffloadPolicy.

The model is tools/bench/torch_gpt2_train.py's GPT-2 (imported): pre-LN blocks, tied
LM head, vocabulary padded to 50304, GPT-2 init, attention through
F.scaled_dot_product_attention. Shape from --n_layer/--n_head/--n_embd (gpt2-xl:
48/25/1600; the 6.6B of the gemini issue: 32/32/4096). Built on the CPU in fp32 so a
model larger than the GPU can be made, then each block and the root are fully_shard'ed
with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16) and
CPUOffloadPolicy(pin_memory=True): parameters, gradients and AdamW states live in
pinned host memory, each block's weights are copied to the GPU for its forward and
backward. Activation checkpointing of every block (torch.utils.checkpoint,
use_reentrant=False) with --checkpoint. AdamW(fused=False: the states are on the CPU,
foreach) lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on 2-D weights, clip 1.0.

--warmup untimed steps, then --steps timed steps (host wall clock around each step,
synchronised); the last line is one JSON object:
  {"impl": "torch-fsdp2-offload", "n_layer", "n_head", "n_embd", "params",
   "micro_batch", "seq", "ms_per_step" (median), "tokens_per_s", "gpu_peak_gib",
   "host_peak_gib" (this process's max RSS), "loss"}

Run on the GPU machine (one GPU), from the repository root:
    torchrun --standalone --nproc_per_node 1 tools/bench/torch_fsdp2_offload.py \\
        --n_layer 48 --n_head 25 --n_embd 1600 --micro_batch 8 --checkpoint
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard  # noqa: E402

import torch_gpt2_train as ref  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n_layer", type=int, default=48)
    p.add_argument("--n_head", type=int, default=25)
    p.add_argument("--n_embd", type=int, default=1600)
    p.add_argument("--micro_batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--checkpoint", action="store_true")
    a = p.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    model = ref.GPT2(a.seq, sdpa=True, n_layer=a.n_layer, n_head=a.n_head, n_embd=a.n_embd)
    n_params = sum(p.numel() for p in model.parameters())
    decay_names = {n for n, q in model.named_parameters() if q.dim() >= 2}
    if a.checkpoint:
        model.h = torch.nn.ModuleList(ref.Checkpointed(b) for b in model.h)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    off = CPUOffloadPolicy(pin_memory=True)
    for block in model.h:
        fully_shard(block, mp_policy=mp, offload_policy=off)
    fully_shard(model, mp_policy=mp, offload_policy=off)
    decay, other = [], []
    for n, q in model.named_parameters():
        (decay if n.replace("block.", "") in decay_names or q.dim() >= 2 else other).append(q)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator(device="cuda").manual_seed(0)
    idx = torch.randint(0, ref.V, (a.micro_batch, a.seq), device="cuda", generator=g)
    tgt = torch.randint(0, ref.V, (a.micro_batch, a.seq), device="cuda", generator=g)
    times, loss = [], None
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    print(json.dumps({
        "impl": "torch-fsdp2-offload", "n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd,
        "params": n_params, "micro_batch": a.micro_batch, "seq": a.seq, "ms_per_step": round(ms, 1),
        "tokens_per_s": round(a.micro_batch * a.seq / ms * 1e3),
        "gpu_peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "host_peak_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "loss": round(float(loss), 4)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
