"""PyTorch reference for kernels/dropout: torch.nn.functional.dropout(x, p=0.1) on the GPU.

Same sizes, dtypes and byte count (2 * n * element size: the input read once,
the output written once) as //kernels/dropout:dropout_bench's BM_DropoutCuda,
timed with CUDA events (median of 50 after 10 warm-ups). PyTorch's training-mode
dropout also writes a one-byte mask for its backward, which is not counted
(ours regenerates the mask from Philox). Run on the GPU machine:
    python3 tools/bench/torch_dropout.py
"""

import torch
import torch.nn.functional as F
from bench_timing import cuda_ms as time_ms

N64MI = 1 << 26
RESIDUAL = 16 * 1024 * 768  # GPT-2 small, B16 x 1024: the residual stream
HIDDEN = 16 * 1024 * 3072   # and the MLP's hidden layer


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<26} {'case':<34} {'GB/s':>8}")
    for n in (N64MI, RESIDUAL, HIDDEN):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(n, device="cuda", dtype=dtype)
            ms = time_ms(lambda: F.dropout(x, p=0.1, training=True))
            case = f"{str(dtype)[6:]} n={n} p=0.1"
            print(f"{'F.dropout(x, p=0.1)':<26} {case:<34} {2 * n * x.element_size() / (ms * 1e-3) / 1e9:>8.1f}")


if __name__ == "__main__":
    main()
