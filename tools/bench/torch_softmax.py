"""PyTorch reference for kernels/softmax: softmax over the last axis, forward and backward.

Same shapes, dtypes and byte counts as //kernels/softmax:softmax_bench's
BM_SoftmaxCuda (forward: read x + write y = 2 * elements * element size;
backward: read y + read dy + write dx = 3 * elements * element size), timed
with CUDA events (median of 50 after 10 warm-ups). For a fair comparison the
main lines time plain torch.softmax(x, dim=-1) and torch._softmax_backward_data
(one fused kernel each, no scale or mask); the "unfused causal fwd" lines time
what a model without a fused kernel runs, softmax((x * scale).masked_fill(causal,
-inf)), counted with the same bytes. Run on the GPU machine:
    python3 tools/bench/torch_softmax.py
"""
import statistics

import torch

SHAPES = [(8, 12, 1024, 1024), (2, 12, 4096, 4096), (1, 4, 256, 50000)]
DTYPES = [torch.float32, torch.bfloat16]
SCALE = 0.125


def time_ms(fn, warmup=10, reps=50):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def report(op, dtype, shape, ms, bytes_moved):
    gbs = bytes_moved / (ms * 1e-3) / 1e9
    dims = "[" + ",".join(str(d) for d in shape) + "]"
    print(f"{op:<20} {str(dtype)[6:]:<10} {dims:<20} {ms * 1e3:>10.1f} {gbs:>8.1f}")


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<20} {'dtype':<10} {'shape':<20} {'us':>10} {'GB/s':>8}")
    for shape in SHAPES:
        for dtype in DTYPES:
            x = torch.empty(shape, device="cuda", dtype=dtype).uniform_(-4, 4)
            dy = torch.empty(shape, device="cuda", dtype=dtype).uniform_(-4, 4)
            y = torch.softmax(x, dim=-1)
            element_bytes = x.numel() * x.element_size()
            report("softmax fwd", dtype, shape, time_ms(lambda: torch.softmax(x, dim=-1)),
                   2 * element_bytes)
            report("softmax bwd", dtype, shape,
                   time_ms(lambda: torch._softmax_backward_data(dy, y, -1, dtype)),
                   3 * element_bytes)
            sq, sk = shape[2], shape[3]
            causal = torch.ones(sq, sk, device="cuda", dtype=torch.bool).triu(sk - sq + 1)
            report("unfused causal fwd", dtype, shape,
                   time_ms(lambda: torch.softmax((x * SCALE).masked_fill(causal, float("-inf")),
                                                 dim=-1)),
                   2 * element_bytes)
            del x, dy, y, causal
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
