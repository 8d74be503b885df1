"""PyTorch reference for //comm/bench:comm_bench: torch.distributed collectives
timed the nccl-tests way, printing the same columns as comm_bench.

Same sizes (--min_bytes/--max_bytes/--factor, nccl-tests' -b/-e/-f), the same
"size" (bytes of the collective's larger buffer), count rounding, algbw and
bus-bandwidth factors (all_reduce 2(n-1)/n; reduce_scatter, all_gather,
all_to_all (n-1)/n; broadcast 1); time is the mean over ranks of each rank's
mean time per iteration (iters calls issued back to back after a barrier, then
one synchronize), and the first call at each size is checked ("#wrong").

On GPUs (nccl backend; NCCL_NVLS_ENABLE=0 as comm_bench sets it):
    torchrun --nproc_per_node 2 tools/bench/torch_comm.py --op all_reduce -b 8 -e 256M -f 2
    python3 tools/bench/torch_comm.py --spawn 2 --op all_reduce -b 8 -e 256M -f 2
    # and for comparison, the same run's figures from comm_bench:
    colossal run --nproc_per_node 2 -- bazel-bin/comm/bench/comm_bench --backend nccl --op all_reduce -b 8 -e 256M -f 2
On CPUs (gloo): add --backend gloo.
"""

import argparse
import os
import socket
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast")
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
}


def parse_bytes(text):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:].lower(), 1)
    return int(text[:-1] if mult != 1 else text) * mult


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--spawn", type=int, default=0, help="start N local ranks (torch.multiprocessing)")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--op", choices=OPS, default="all_reduce")
    p.add_argument("-b", "--min_bytes", type=parse_bytes, default=32 << 20)
    p.add_argument("-e", "--max_bytes", type=parse_bytes, default=32 << 20)
    p.add_argument("-f", "--factor", type=float, default=2.0)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    p.add_argument("--check", type=int, default=1)
    args = p.parse_args(argv)
    if args.factor <= 1 or args.iters < 1 or args.warmup < 0 or args.max_bytes < args.min_bytes:
        p.error("need --factor > 1, --iters >= 1, --warmup >= 0, --max_bytes >= --min_bytes")
    return args


def sizes_for(op, nbytes, elem, n):
    """(input count, output count, nccl-tests count) as comm_bench's sizes_for."""
    count = nbytes // elem
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        count = count // n * n
    if op == "reduce_scatter":
        return count, count // n, count
    if op == "all_gather":
        return count // n, count, count
    return count, count, count


def bus_factor(op, n):
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def values(count, rank, device, dtype, offset=0):
    """Rank r's input: ((i + 3r) % 8) + 1, exact in every dtype (as comm_bench)."""
    i = torch.arange(offset, offset + count, device=device, dtype=torch.int64)
    return ((i + 3 * rank) % 8 + 1).to(dtype)


def expected(op, out_count, rank, n, device, dtype):
    if op == "all_reduce":
        return sum(values(out_count, s, device, torch.int64) for s in range(n)).to(dtype)
    if op == "reduce_scatter":
        return sum(values(out_count, s, device, torch.int64, rank * out_count)
                   for s in range(n)).to(dtype)
    if op == "all_gather":
        per = out_count // n
        return torch.cat([values(per, s, device, dtype) for s in range(n)])
    if op == "all_to_all":
        block = out_count // n
        return torch.cat([values(block, s, device, dtype, rank * block) for s in range(n)])
    return values(out_count, 0, device, dtype)


def issue(op, inp, out):
    """One collective, asynchronously (the in-place ones run on `out`)."""
    if op == "all_reduce":
        return dist.all_reduce(out, async_op=True)
    if op == "reduce_scatter":
        return dist.reduce_scatter_tensor(out, inp, async_op=True)
    if op == "all_gather":
        return dist.all_gather_into_tensor(out, inp, async_op=True)
    if op == "all_to_all":
        return dist.all_to_all_single(out, inp, async_op=True)
    return dist.broadcast(out, src=0, async_op=True)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(args, rank, world, local_rank):
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    dtype = DTYPES[args.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    n = world
    if rank == 0:
        print(f"# torch_comm: {args.op}, torch {torch.__version__} {args.backend}, {n} ranks, "
              f"dtype {args.dtype}")
        print(f"# minBytes {args.min_bytes} maxBytes {args.max_bytes} step: {args.factor:g}(factor) "
              f"warmup iters: {args.warmup} iters: {args.iters} validation: {args.check}\n#")
        print(f"#{'size':>11} {'count':>12} {'type':>8} {'redop':>6} {'root':>6} {'time':>10} "
              f"{'algbw':>8} {'busbw':>8} {'#wrong':>7}")
        print(f"#{'(B)':>11} {'(elements)':>12} {'':>8} {'':>6} {'':>6} {'(us)':>10} "
              f"{'(GB/s)':>8} {'(GB/s)':>8} {'':>7}", flush=True)
    reduces = args.op in ("all_reduce", "reduce_scatter")
    busbw_sum, rows, total_wrong = 0.0, 0, 0
    b = float(args.min_bytes)
    while b <= args.max_bytes:
        in_count, out_count, count = sizes_for(args.op, int(b), elem, n)
        b = max(b * args.factor, b + 1)
        if count == 0:
            continue
        inp = torch.zeros(in_count, device=device, dtype=dtype)
        out = torch.zeros(out_count, device=device, dtype=dtype)
        wrong = 0
        if args.check:
            src = values(in_count, rank, device, dtype)
            (out if args.op in ("all_reduce", "broadcast") else inp).copy_(src)
            issue(args.op, inp, out).wait()
            sync(device)
            want = expected(args.op, out_count, rank, n, device, dtype)
            wrong = int((out != want).sum().item())
        for _ in range(args.warmup):
            issue(args.op, inp, out).wait()
        sync(device)
        dist.barrier()
        sync(device)
        t0 = time.perf_counter()
        works = [issue(args.op, inp, out) for _ in range(args.iters)]
        for w in works:
            w.wait()
        sync(device)
        us = (time.perf_counter() - t0) * 1e6 / args.iters
        # Mean time and summed #wrong over ranks (after the timed region).
        gathered = [None] * n
        dist.all_gather_object(gathered, (us, wrong))
        if rank == 0:
            t = sum(g[0] for g in gathered) / n
            wrong_sum = sum(g[1] for g in gathered)
            size = count * elem
            algbw = size / 1e3 / t
            busbw = algbw * bus_factor(args.op, n)
            busbw_sum += busbw
            rows += 1
            total_wrong += wrong_sum
            print(f"{size:12d} {count:12d} {args.dtype:>8} {'sum' if reduces else 'none':>6} "
                  f"{'0' if args.op == 'broadcast' else '-1':>6} {t:10.2f} {algbw:8.3f} "
                  f"{busbw:8.3f} {wrong_sum if args.check else 'N/A':>7}", flush=True)
        del inp, out
    dist.barrier()
    if rank == 0:
        print(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
        print(f"# Avg bus bandwidth    : {busbw_sum / rows if rows else 0.0:g}\n#", flush=True)
    dist.destroy_process_group()
    return 1 if total_wrong else 0


def spawned(local_rank, args, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(local_rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank),
                      LOCAL_WORLD_SIZE=str(world))
    code = run(args, local_rank, world, local_rank)
    if code:
        sys.exit(code)


def main():
    args = parse_args()
    if args.spawn > 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        import torch.multiprocessing as mp
        mp.spawn(spawned, args=(args, args.spawn, port), nprocs=args.spawn, join=True)
        return 0
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    return run(args, rank, world, local_rank)


if __name__ == "__main__":
    sys.exit(main())
