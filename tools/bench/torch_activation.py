"""PyTorch reference for kernels/activation: tanh-approximate GELU and bias + GELU.

Same shapes, dtypes and byte counts as //kernels/activation:activation_bench
(each input read once, each output written once; n = rows * cols, c = cols,
e = element size):
    gelu forward         F.gelu(x, approximate="tanh")               2 n e
    gelu backward        aten.gelu_backward(dout, x, "tanh")          3 n e
    bias_gelu forward    F.gelu(x + b, approximate="tanh")            2 n e + c e
    bias_gelu backward   autograd.grad of the above for (x, b)        3 n e + 3 c e
Timed with CUDA events (median of 50 after 10 warm-ups). Run on the GPU machine:
    python3 tools/bench/torch_activation.py
"""

import torch
import torch.nn.functional as F
from bench_timing import cuda_ms as time_ms


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<26} {'dtype':<10} {'shape':>12} {'us':>9} {'GB/s':>8}")
    rows = 8 * 1024
    for dtype in (torch.float32, torch.bfloat16):
        for cols in (3072, 6400):
            e = torch.tensor([], dtype=dtype).element_size()
            n = rows * cols
            x = torch.randn(rows, cols, device="cuda", dtype=dtype)
            dout = torch.randn(rows, cols, device="cuda", dtype=dtype)
            b = torch.randn(cols, device="cuda", dtype=dtype)
            xg = x.clone().requires_grad_(True)
            bg = b.clone().requires_grad_(True)
            y = F.gelu(xg + bg, approximate="tanh")

            cases = [
                ("gelu forward", lambda: F.gelu(x, approximate="tanh"), 2 * n * e),
                ("gelu backward",
                 lambda: torch.ops.aten.gelu_backward(dout, x, approximate="tanh"), 3 * n * e),
                ("bias_gelu forward", lambda: F.gelu(x + b, approximate="tanh"), 2 * n * e + cols * e),
                ("bias_gelu backward",
                 lambda: torch.autograd.grad(y, (xg, bg), dout, retain_graph=True),
                 3 * n * e + 3 * cols * e),
            ]
            for name, fn, nbytes in cases:
                ms = time_ms(fn)
                shape = f"{rows}x{cols}"
                print(f"{name:<26} {str(dtype)[6:]:<10} {shape:>12} {ms * 1e3:>9.1f} "
                      f"{nbytes / (ms * 1e-3) / 1e9:>8.1f}")


if __name__ == "__main__":
    main()
