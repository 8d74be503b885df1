"""PyTorch reference for kernels/layernorm: F.layer_norm / F.rms_norm and residual add.

Same shapes (rows = 8 x 1024 tokens, C in 768/1600/4096), dtypes (float32,
bfloat16) and byte counts as //kernels/layernorm:layernorm_bench, so the GB/s
columns compare directly. Bytes per call count each tensor once; mean and rstd
are float32 [rows] (what PyTorch saves too):
    layernorm fwd:     x + gamma + beta + out + mean + rstd
    layernorm bwd:     dout + x + mean + rstd + gamma + dx + dgamma, dbeta read and written
    layernorm fwd+bwd: the sum of the two (timed as one autograd forward + backward)
    rmsnorm fwd:       x + gamma + out + rstd
    rmsnorm fwd+bwd:   rmsnorm fwd + (dout + x + rstd + gamma + dx + dgamma read and written)
    residual fwd:      x + residual + gamma + beta + residual_out + out + mean + rstd
                       (PyTorch: r = x + residual; F.layer_norm(r))
Each timed sample is a batch of 20 calls between two CUDA events (median of 30
samples after warm-up), rotating over enough copies of the activations
(>= 256 MB) that none is still in L2, as the C++ benchmark does. The backward
is timed with torch.autograd.grad (fresh gradients, no .grad accumulation).
Run on the GPU machine:
    python3 tools/bench/torch_layernorm.py
"""
import statistics

import torch
import torch.nn.functional as F

ROWS = 8 * 1024
BATCH = 20
ROTATE_BYTES = 256e6


def bytes_moved(op, dtype, rows, c):
    es = torch.tensor([], dtype=dtype).element_size()
    act, par, stat = rows * c * es, c * es, rows * 4
    ln_fwd = 2 * act + 2 * par + 2 * stat
    ln_bwd = 3 * act + 2 * stat + par + 4 * par
    rms_fwd = 2 * act + par + stat
    rms_bwd = 3 * act + stat + par + 2 * par
    return {
        "layernorm fwd": ln_fwd,
        "layernorm fwd+bwd": ln_fwd + ln_bwd,
        "rmsnorm fwd": rms_fwd,
        "rmsnorm fwd+bwd": rms_fwd + rms_bwd,
        "residual+layernorm fwd": 4 * act + 2 * par + 2 * stat,
    }[op]


def time_per_call_ms(step, sets, warmup=3, reps=30):
    """Median over reps of (time of BATCH calls) / BATCH; step(i) runs call i."""
    for i in range(warmup * BATCH):
        step(i % sets)
    torch.cuda.synchronize()
    times, k = [], 0
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(BATCH):
            step(k % sets)
            k += 1
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / BATCH)
    return statistics.median(times)


def make_step(op, dtype, c):
    sets = int(max(1.0, ROTATE_BYTES / bytes_moved(op, dtype, ROWS, c) + 1))
    dev = "cuda"
    backward = op.endswith("fwd+bwd")
    xs = [torch.rand(ROWS, c, device=dev, dtype=dtype) * 4 - 2 for _ in range(sets)]
    dys = [torch.rand(ROWS, c, device=dev, dtype=dtype) * 2 - 1 for _ in range(sets)] if backward else None
    res = [torch.rand(ROWS, c, device=dev, dtype=dtype) * 2 - 1 for _ in range(sets)] \
        if op.startswith("residual") else None
    gamma = (torch.rand(c, device=dev, dtype=dtype) + 0.5).requires_grad_(backward)
    beta = (torch.rand(c, device=dev, dtype=dtype) - 0.5).requires_grad_(backward)
    if backward:
        for x in xs:
            x.requires_grad_(True)
    eps = 1e-5

    if op == "layernorm fwd":
        def step(i):
            F.layer_norm(xs[i], (c,), gamma, beta, eps)
    elif op == "layernorm fwd+bwd":
        def step(i):
            y = F.layer_norm(xs[i], (c,), gamma, beta, eps)
            torch.autograd.grad(y, (xs[i], gamma, beta), dys[i])
    elif op == "rmsnorm fwd":
        def step(i):
            F.rms_norm(xs[i], (c,), gamma, eps)
    elif op == "rmsnorm fwd+bwd":
        def step(i):
            y = F.rms_norm(xs[i], (c,), gamma, eps)
            torch.autograd.grad(y, (xs[i], gamma), dys[i])
    else:  # residual+layernorm fwd
        def step(i):
            r = xs[i] + res[i]
            F.layer_norm(r, (c,), gamma, beta, eps)
    return step, sets


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<24} {'dtype':<10} {'rows':>6} {'C':>6} {'us/call':>9} {'GB/s':>8}")
    ops = ("layernorm fwd", "layernorm fwd+bwd", "rmsnorm fwd", "rmsnorm fwd+bwd",
           "residual+layernorm fwd")
    for op in ops:
        for dtype in (torch.float32, torch.bfloat16):
            for c in (768, 1600, 4096):
                step, sets = make_step(op, dtype, c)
                ms = time_per_call_ms(step, sets)
                gbs = bytes_moved(op, dtype, ROWS, c) / (ms * 1e-3) / 1e9
                print(f"{op:<24} {str(dtype)[6:]:<10} {ROWS:>6} {c:>6} {ms * 1e3:>9.1f} {gbs:>8.1f}")
                del step
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
