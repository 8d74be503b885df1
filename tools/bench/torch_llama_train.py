"""PyTorch reference for the Llama training benchmark (issue #17): transformers'
LlamaForCausalLM (or Qwen2ForCausalLM) at a published shape, one optimizer step timed, beside
`colossal bench recipes/llama_finetune.lua` in the same call; or MixtralForCausalLM at
recipes/mixtral_zero.lua's GPU shape (--shape mixtral_zero) beside `colossal bench
recipes/mixtral_zero.lua`.

The model: LlamaForCausalLM(LlamaConfig of --shape) with random weights (transformers'
init), attn_implementation "sdpa" (F.scaled_dot_product_attention, flash backend)
or "eager". One step: zero_grad(set_to_none), forward under
torch.autocast(bfloat16) (fp32 weights, bf16 matmuls), the model's own
cross-entropy loss, backward, clip_grad_norm_(1.0), AdamW(fused=True, lr 2e-5,
betas (0.9, 0.95), weight decay 0). --checkpointing turns on transformers'
gradient checkpointing (every decoder layer re-runs its forward in backward).

Variants (--variants; all by default): eager (sdpa attention, eager PyTorch) and
compile (torch.compile of the same model). ms/step is the CUDA-event median of
10 steps after 3 warm-ups; tokens/s = B*T / step; peak memory is
torch.cuda.max_memory_allocated over the timed steps. Random tokens, B x T from
--batch/--seq. Prints one line per variant and a JSON line.

    python3 tools/bench/torch_llama_train.py --shape llama3.2-1b --batch 4 --seq 2048
"""

import argparse
import json
import sys

import torch
from bench_timing import cuda_ms

SHAPES = {
    # Hugging Face's config.json of the published checkpoints (the fields that matter).
    "llama3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                        num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                        head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
                        rope_theta=500000.0, tie_word_embeddings=True,
                        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192}),
    "tinyllama-1.1b": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                           num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                           max_position_embeddings=2048, rms_norm_eps=1e-5),
    # Qwen2ForCausalLM (q/k/v biases), as colossal's qwen2.5-* presets.
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
                         tie_word_embeddings=True, use_sliding_window=False),
    "qwen2.5-1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         max_position_embeddings=131072, rms_norm_eps=1e-6, rope_theta=1000000.0,
                         tie_word_embeddings=True, use_sliding_window=False),
    # MixtralForCausalLM as recipes/mixtral_zero.lua's GPU model: 8 experts, 2 a token.
    "mixtral_zero": dict(vocab_size=50257, hidden_size=1024, intermediate_size=3584,
                         num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=4,
                         num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=2048,
                         rms_norm_eps=1e-5, rope_theta=1000000.0, sliding_window=None,
                         tie_word_embeddings=False),
}


def run(variant, args):
    from transformers import (LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM)

    torch.manual_seed(0)
    config_class, model_class = LlamaConfig, LlamaForCausalLM
    if args.shape.startswith("qwen2"):
        config_class, model_class = Qwen2Config, Qwen2ForCausalLM
    elif args.shape.startswith("mixtral"):
        config_class, model_class = MixtralConfig, MixtralForCausalLM
    config = config_class(**SHAPES[args.shape], attn_implementation="sdpa")
    model = model_class(config).cuda()
    if args.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, betas=(0.9, 0.95), weight_decay=0.0,
                            fused=True)
    step_model = torch.compile(model) if variant == "compile" else model
    tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ms = cuda_ms(step, warmup=0, reps=10)
    peak = torch.cuda.max_memory_allocated()
    n = sum(p.numel() for p in model.parameters())
    del model, opt, step_model
    torch.cuda.empty_cache()
    return {"variant": variant, "ms": ms, "tokens_per_s": args.batch * args.seq / ms * 1e3,
            "peak_gib": peak / 2**30, "params": n}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="llama3.2-1b", choices=sorted(SHAPES))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--variants", default="eager,compile")
    args = parser.parse_args()
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}, {args.shape} B{args.batch} T{args.seq}"
          f"{' checkpointing' if args.checkpointing else ''}")
    for variant in args.variants.split(","):
        try:
            r = run(variant, args)
        except torch.cuda.OutOfMemoryError:
            print(f"torch {variant}: out of memory")
            torch.cuda.empty_cache()
            continue
        print(f"torch {variant}: {r['ms']:.1f} ms/step, {r['tokens_per_s']:.0f} tokens/s, "
              f"peak {r['peak_gib']:.1f} GiB ({r['params'] / 1e9:.3f}B parameters)")
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
