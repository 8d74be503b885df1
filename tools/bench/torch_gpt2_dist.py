"""PyTorch data-parallel reference for tools/bench/scaling.sh: GPT-2 training steps under DDP or FSDP.

The model is tools/bench/torch_gpt2_train.py's (imported, not copied): pre-LN GPT-2,
tied LM head, vocabulary padded to 50304 (loss over the 50257 real columns), GPT-2
init, attention through F.scaled_dot_product_attention(is_causal=True) (that
script's "eager-sdpa" variant). Sizes:
  gpt2     12 layers, 12 heads, n_embd  768 (124M)
  gpt2-xl  48 layers, 25 heads, n_embd 1600 (1.5B)
Sequence length 1024, random tokens (a fixed batch per rank, a different one on
each rank).

Modes:
  ddp   fp32 weights on every GPU, torch.autocast(bfloat16) forward (weights,
        gradients and Adam states stay fp32), DistributedDataParallel with its
        default 25 MB gradient buckets.
  fsdp  FSDP1 (torch.distributed.fsdp.FullyShardedDataParallel), FULL_SHARD, each
        transformer block its own unit (ModuleWrapPolicy({Block})), the rest
        (wte/wpe/ln_f, tied head) in the root unit; MixedPrecision(param, reduce
        and buffer dtype bf16) over fp32 sharded weights, no autocast;
        use_orig_params=True so AdamW can keep its decay/no-decay groups.
  fsdp2 FSDP2 (torch.distributed.fsdp.fully_shard) on each transformer block and
        then the root, MixedPrecisionPolicy(param_dtype bf16, reduce_dtype bf16)
        over fp32 sharded weights (DTensors), no autocast; clip_grad_norm_ over the
        DTensor parameters.

One step, as torch_gpt2_train.py's: zero_grad(set_to_none), forward,
cross-entropy, backward, clip_grad_norm_(1.0) (FSDP: model.clip_grad_norm_),
AdamW(fused=True, lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on 2-D
weights, 0 on biases/LayerNorm). --warmup untimed steps, then the peak-memory
counters are reset and --steps steps are timed with CUDA events (one pair per
step, synchronised after each); ms/step is rank 0's median. Peak memory is
torch.cuda.max_memory_allocated over the timed steps, the maximum over ranks.

The last line rank 0 prints is one JSON object:
  {"impl": "torch", "mode", "model", "world", "micro_batch", "seq", "steps",
   "ms_per_step" (median), "ms_per_step_mean", "tokens_per_s" (global),
   "tokens_per_s_per_gpu", "peak_gib" (max over ranks), "peak_reserved_gib", "loss"}

Run on the GPU machine, from the repository root:
    export NCCL_NVLS_ENABLE=0
    torchrun --standalone --nproc_per_node 4 tools/bench/torch_gpt2_dist.py \\
        --model gpt2-xl --mode fsdp --micro_batch 4 --steps 10 --warmup 3
    torchrun --standalone --nproc_per_node 1 tools/bench/torch_gpt2_dist.py --model gpt2 --mode ddp
(`python3 -m torch.distributed.run` is the same as `torchrun`.)
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import torch_gpt2_train as ref  # noqa: E402  (the model; also puts bench_timing on the path)

MODELS = {  # name: (n_layer, n_head, n_embd)
    "gpt2": (12, 12, 768),
    "gpt2-xl": (48, 25, 1600),
}
WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


def clean_name(name):
    """A parameter's name without the wrappers' parts (FSDP units anywhere, DDP's leading module.)."""
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name.removeprefix("module.")


def build(args, local_rank):
    n_layer, n_head, n_embd = MODELS[args.model]
    device = torch.device("cuda", local_rank)
    with device:  # parameters are created (and initialised) on this rank's GPU
        model = ref.GPT2(args.seq, sdpa=True, n_layer=n_layer, n_head=n_head, n_embd=n_embd)
    # Decay 2-D weights only; decided before wrapping (FSDP's sharded views are all 1-D).
    decay_names = {name for name, p in model.named_parameters() if p.dim() >= 2}
    n_other = sum(1 for p in model.parameters() if p.dim() < 2)
    n_params = sum(p.numel() for p in model.parameters())

    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        wrapped = DDP(model, device_ids=[local_rank], output_device=local_rank)  # bucket_cap_mb 25

        def clip():
            torch.nn.utils.clip_grad_norm_(wrapped.parameters(), 1.0)

        autocast = True
    elif args.mode == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
        for module in model.modules():
            if isinstance(module, ref.Block):
                fully_shard(module, mp_policy=mp)
        wrapped = fully_shard(model, mp_policy=mp)

        def clip():
            torch.nn.utils.clip_grad_norm_(wrapped.parameters(), 1.0)

        autocast = False
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        wrapped = FSDP(
            model,
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            auto_wrap_policy=ModuleWrapPolicy({ref.Block}),
            mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                                           buffer_dtype=torch.bfloat16),
            device_id=device,
            use_orig_params=True,
        )

        def clip():
            wrapped.clip_grad_norm_(1.0)

        autocast = False

    decay, no_decay = [], []
    for name, p in wrapped.named_parameters():
        (decay if clean_name(name) in decay_names else no_decay).append(p)
    if len(decay) != len(decay_names) or len(no_decay) != n_other:  # wrapper prefixes not all stripped
        raise RuntimeError(f"parameter groups after wrapping: {len(decay)} decay, {len(no_decay)} other; "
                           f"the model has {len(decay_names)} 2-D weights and {n_other} others")
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    return wrapped, opt, clip, autocast, n_params


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="gpt2")
    parser.add_argument("--mode", choices=["ddp", "fsdp", "fsdp2"], default="ddp")
    parser.add_argument("--micro_batch", type=int, default=8, help="sequences per GPU per step")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.micro_batch < 1:
        parser.error("need --steps >= 1, --warmup >= 0, --micro_batch >= 1")
    if "LOCAL_RANK" not in os.environ:
        parser.error("launch with torchrun (e.g. torchrun --standalone --nproc_per_node 1 ...)")

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # read when NCCL makes its communicators
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cuda.matmul.allow_tf32 = False  # as torch_gpt2_train.py
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1337)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)

    model, opt, clip, autocast, n_params = build(args, local_rank)
    if rank == 0:
        print(f"torch {torch.__version__} on {torch.cuda.get_device_name()} x{world}: {args.model} "
              f"({n_params / 1e6:.1f}M parameters), {args.mode}, micro-batch {args.micro_batch} x {args.seq}, "
              f"bf16", flush=True)

    device = torch.device("cuda", local_rank)
    gen = torch.Generator(device=device).manual_seed(1000 + rank)  # each rank its own batch
    idx = torch.randint(0, ref.V, (args.micro_batch, args.seq), device=device, generator=gen)
    targets = torch.randint(0, ref.V, (args.micro_batch, args.seq), device=device, generator=gen)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = model(idx, targets)
        loss.backward()
        clip()
        opt.step()
        losses.append(loss.detach())

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    peaks = torch.tensor([torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()],
                         dtype=torch.float64, device=device)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    loss = losses[-1].float()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)

    if rank == 0:
        ms = statistics.median(times)
        tokens = args.micro_batch * args.seq * world
        result = {
            "impl": "torch", "mode": args.mode, "model": args.model, "world": world,
            "micro_batch": args.micro_batch, "seq": args.seq, "steps": args.steps,
            "ms_per_step": round(ms, 3), "ms_per_step_mean": round(statistics.mean(times), 3),
            "tokens_per_s": round(tokens / (ms * 1e-3), 1),
            "tokens_per_s_per_gpu": round(tokens / world / (ms * 1e-3), 1),
            "peak_gib": round(peaks[0].item() / 2**30, 3),
            "peak_reserved_gib": round(peaks[1].item() / 2**30, 3),
            "loss": round(loss.item(), 4),
        }
        print(f"{args.mode} x{world}: {ms:.1f} ms/step (median of {args.steps}), "
              f"{result['tokens_per_s_per_gpu']:.0f} tokens/s per GPU, peak {result['peak_gib']:.2f} GiB",
              flush=True)
        print(json.dumps(result), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
