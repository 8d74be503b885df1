"""PyTorch reference for kernels/loss: F.cross_entropy forward + backward.

Same shapes and dtypes as //kernels/loss:loss_bench's BM_CrossEntropyFusedCuda
(mean reduction, random logits in [-4, 4), random targets), timed with CUDA
events (median of 30 after 5 warm-ups). One step is F.cross_entropy on the
logits and torch.autograd.grad of the loss w.r.t. them (a fresh gradient
tensor, as an autograd training step produces; no accumulation into .grad).
GB/s uses the ideal byte count of loss_bench's "ideal_GB/s": logits read once
plus dlogits written once (2 * n * v * element size), although PyTorch moves
several times that. Run on the GPU machine:
    python3 tools/bench/torch_loss.py
"""

import torch
import torch.nn.functional as F
from bench_timing import cuda_ms as time_ms


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'op':<34} {'dtype':<10} {'n':>6} {'v':>7} {'ms':>8} {'GB/s':>8}")
    cases = [(torch.bfloat16, 8 * 1024, 50257), (torch.float32, 8 * 1024, 50257),
             (torch.bfloat16, 4096, 128256)]
    for dtype, n, v in cases:
        gen = torch.Generator(device="cuda").manual_seed(0)
        logits = (torch.rand(n, v, device="cuda", generator=gen) * 8 - 4).to(dtype)
        logits.requires_grad_(True)
        targets = torch.randint(0, v, (n,), device="cuda", generator=gen)

        def step():
            loss = F.cross_entropy(logits, targets)
            (grad,) = torch.autograd.grad(loss, logits)
            return grad

        ms = time_ms(step)
        gbs = 2 * n * v * logits.element_size() / (ms * 1e-3) / 1e9
        print(f"{'F.cross_entropy fwd+bwd (autograd)':<34} {str(dtype)[6:]:<10} {n:>6} {v:>7} "
              f"{ms:>8.3f} {gbs:>8.1f}")
        del logits, targets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
