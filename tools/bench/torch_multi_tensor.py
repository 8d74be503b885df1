"""PyTorch reference for kernels/multi_tensor: L2 norms and in-place scaling.

Same inputs and byte counts as //kernels/multi_tensor:multi_tensor_bench: GPT-2
small's 124,439,808 gradients as one flat tensor or as its 148 tensors, float32 and
bfloat16. Bytes: a norm reads every element once (n * element size); an in-place
scale reads and writes it (2 * n * element size).
  norm, flat:    torch.linalg.vector_norm(x)
  norm, tensors: torch._foreach_norm + vector_norm of the stacked norms (what
                 torch.nn.utils.clip_grad_norm_ does)
  scale, flat:   x.mul_(s)
  accumulate, flat (CUDA): vector_norm(acc.add_(part)), counted as 3 * n * element
                 size like multi_tensor::accumulate_cuda (torch reads the sum again)
  scale, tensors: torch._foreach_mul_(xs, s), and GradScaler's
                 torch._amp_foreach_non_finite_check_and_unscale_ (scale plus a
                 found_inf flag, like multi_tensor::scale_cuda)
GPU times are CUDA-event medians (50 after 10 warm-ups); the CPU lines time the
same ops on 4,194,304 elements and on the 148 tensors, wall clock, all threads.
Run on the GPU machine:
    python3 tools/bench/torch_multi_tensor.py
"""

import torch
from bench_timing import cuda_ms, cpu_ms, gpt2_sizes


def line(op, dtype, layout, n, ms, nbytes):
    print(f"{op:<44} {str(dtype)[6:]:<9} {layout:<17} {n:>10} {ms:>9.3f} {nbytes / (ms * 1e-3) / 1e9:>8.1f}")


def run(device, timer, flat_n):
    sizes = gpt2_sizes()
    for dtype in (torch.float32, torch.bfloat16):
        es = torch.tensor([], dtype=dtype).element_size()
        for layout, shape in (("flat", [flat_n]), ("gpt2-148-tensors", sizes)):
            n = sum(shape)
            buf = torch.randn(n, device=device).to(dtype)
            xs = list(torch.split(buf, shape))
            prefix = "cpu " if device == "cpu" else ""
            if layout == "flat":
                ms = timer(lambda: torch.linalg.vector_norm(buf))
                line(prefix + "linalg.vector_norm", dtype, layout, n, ms, n * es)
                ms = timer(lambda: buf.mul_(0.5).mul_(2.0)) / 2
                line(prefix + "mul_", dtype, layout, n, ms, 2 * n * es)
                if device == "cuda":  # multi_tensor::accumulate_cuda's job: acc += part, the sum's norm
                    part = torch.randn(n, device=device).to(dtype) * 1e-3
                    ms = timer(lambda: torch.linalg.vector_norm(buf.add_(part)))
                    line("add_ + linalg.vector_norm", dtype, layout, n, ms, 3 * n * es)
                    del part
            else:
                ms = timer(lambda: torch.linalg.vector_norm(torch.stack(torch._foreach_norm(xs))))
                line(prefix + "_foreach_norm + vector_norm(stack)", dtype, layout, n, ms, n * es)
                ms = timer(lambda: (torch._foreach_mul_(xs, 0.5), torch._foreach_mul_(xs, 2.0))) / 2
                line(prefix + "_foreach_mul_", dtype, layout, n, ms, 2 * n * es)
            if device == "cuda":
                found = torch.zeros(1, device=device)
                inv = torch.full((1,), 0.5, device=device)
                two = torch.full((1,), 2.0, device=device)

                def unscale():
                    torch._amp_foreach_non_finite_check_and_unscale_(xs, found, inv)
                    torch._amp_foreach_non_finite_check_and_unscale_(xs, found, two)

                try:
                    ms = timer(unscale) / 2
                    line("_amp_foreach_non_finite_check_and_unscale_", dtype, layout, n, ms, 2 * n * es)
                except RuntimeError as e:  # not every dtype is supported by every torch
                    print(f"_amp_foreach_non_finite_check_and_unscale_ {str(dtype)[6:]}: {e}")
            del buf, xs


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}, {torch.get_num_threads()} CPU threads")
    print(f"{'op':<44} {'dtype':<9} {'layout':<17} {'n':>10} {'ms':>9} {'GB/s':>8}")
    run("cuda", cuda_ms, sum(gpt2_sizes()))
    run("cpu", cpu_ms, 1 << 22)


if __name__ == "__main__":
    main()
