"""PyTorch reference for kernels/adam: torch.optim.AdamW on GPU (fused=True) and CPU.

Same parameter counts and byte count as //kernels/adam:adam_bench: GPT-2 small's
124,439,808 parameters as one flat tensor or as its 148 tensors; bytes per
parameter = read p, m, v (12) + grad (4 or 2) + write p, m, v (12) + model copy
(0 or 2). Cases (adam_bench's labels):
  grad=float32 copy=none          fp32 params and grads: one AdamW(fused=True) step
  grad=bfloat16 copy=bfloat16     what a bf16 model needs in PyTorch: upcast the bf16
                                  grads into the fp32 master grads, the fused step,
                                  copy the fp32 params into the bf16 model weights
GPU times are CUDA-event medians (20 after 5 warm-ups); CPU times are wall-clock
medians with all threads (torch.get_num_threads()). Run on the GPU machine:
    python3 tools/bench/torch_adam.py
"""

import torch
from bench_timing import cuda_ms, cpu_ms, gpt2_sizes


def make_params(sizes, device):
    params = []
    for s in sizes:
        p = torch.nn.Parameter(torch.randn(s, device=device) * 0.02)
        p.grad = torch.randn(s, device=device) * 1e-3
        params.append(p)
    return params


def report(what, layout, case, n, ms, bytes_per_param):
    gbs = bytes_per_param * n / (ms * 1e-3) / 1e9
    print(f"{what:<26} {layout:<17} {case:<28} {n:>10} {ms:>9.3f} {gbs:>8.1f} {n / (ms * 1e-3):>10.3e}")


def main():
    sizes = gpt2_sizes()
    n = sum(sizes)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}, {torch.get_num_threads()} CPU threads")
    print(f"{'op':<26} {'layout':<17} {'case':<28} {'params':>10} {'ms':>9} {'GB/s':>8} {'params/s':>10}")
    for layout, shape in (("flat", [n]), ("gpt2-148-tensors", sizes)):
        params = make_params(shape, "cuda")
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)
        ms = cuda_ms(opt.step)
        report("AdamW(fused=True)", layout, "grad=float32 copy=none", n, ms, 28)
        bf16_grads = [torch.randn_like(p, dtype=torch.bfloat16) * 1e-3 for p in params]
        bf16_model = [p.detach().to(torch.bfloat16) for p in params]
        grads = [p.grad for p in params]

        def mixed_step():
            torch._foreach_copy_(grads, bf16_grads)
            opt.step()
            torch._foreach_copy_(bf16_model, [p.detach() for p in params])

        ms = cuda_ms(mixed_step)
        report("upcast+AdamW(fused)+copy", layout, "grad=bfloat16 copy=bfloat16", n, ms, 28)
        del params, opt, bf16_grads, bf16_model, grads
        torch.cuda.empty_cache()

    # CPU: one flat tensor of every parameter, all threads.
    for fused in (False, True):
        params = make_params([n], "cpu")
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=fused, foreach=False)
        ms = cpu_ms(opt.step)
        report(f"cpu AdamW(fused={fused})", "flat", "grad=float32 copy=none", n, ms, 28)
        del params, opt


if __name__ == "__main__":
    main()
