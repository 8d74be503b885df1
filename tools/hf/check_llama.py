#!/usr/bin/env python3
"""Llama weights in and out of colossal against transformers (issue #17), run on
the GPU host (torch, transformers, safetensors; nothing downloaded).

    python3 tools/hf/check_llama.py --case-bin bazel-bin/tools/hf/llama_hf_case --work /tmp/llama_check

For each of two tiny random LlamaForCausalLM (2 layers, hidden 256, 8 query /
2 key-value heads, Llama-3 rope scaling; untied and tied embeddings) and a
MistralForCausalLM of that shape with a sliding window of 128 (longer than the
97 tokens: there full causal attention is the window's), a Qwen2ForCausalLM
of that shape (q/k/v biases, tied, rope_theta 1e6), and a MixtralForCausalLM of
that shape with 4 experts, 2 per token:
  1. transformers saves it (save_pretrained, float32) with fixed tokens (a
     Mixtral saved with transformers 5's fused experts is rewritten into the
     published per-expert w1/w2/w3 form first);
  2. colossal (llama_hf_case) loads the directory, writes its float32 logits on
     the CPU and the GPU, and saves its own checkpoint;
  3. transformers' logits on the same tokens are compared with colossal's, and
     AutoModelForCausalLM.from_pretrained(colossal's checkpoint) must be the same
     class (Mistral keeps its window) and give them again.
Prints one line per comparison: max |ours - theirs| / max |theirs|; exit 1 when any
is 1e-4 or more (--tolerance).
"""
import argparse
import os
import subprocess
import sys


def published_expert_form(hf_dir, load_file, save_file):
    """Rewrites transformers 5's fused Mixtral experts (mlp.experts.gate_up_proj
    [E, 2I, C] with the gate first, mlp.experts.down_proj [E, C, I], mlp.gate) into
    the published checkpoints' block_sparse_moe.experts.<j>.w1/w3/w2 and
    block_sparse_moe.gate; a directory already in that form is left alone."""
    import glob
    for path in glob.glob(os.path.join(hf_dir, "*.safetensors")):
        tensors = load_file(path)
        if not any(k.endswith("experts.gate_up_proj") for k in tensors):
            continue
        out = {}
        for key, value in tensors.items():
            prefix, _, leaf = key.rpartition(".mlp.")
            if not prefix:
                out[key] = value
                continue
            moe = prefix + ".block_sparse_moe."
            if leaf == "experts.gate_up_proj":
                inter = value.shape[1] // 2
                for j in range(value.shape[0]):
                    out[f"{moe}experts.{j}.w1.weight"] = value[j, :inter].contiguous()
                    out[f"{moe}experts.{j}.w3.weight"] = value[j, inter:].contiguous()
            elif leaf == "experts.down_proj":
                for j in range(value.shape[0]):
                    out[f"{moe}experts.{j}.w2.weight"] = value[j].contiguous()
            elif leaf == "gate.weight":
                out[moe + "gate.weight"] = value
            else:
                out[key] = value
        if os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json")):
            sys.exit(f"{hf_dir}: a sharded save; the index would need rewriting too")
        save_file(out, path, metadata={"format": "pt"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case-bin", required=True, help="the llama_hf_case binary")
    parser.add_argument("--work", default="/tmp/llama_check")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()

    import torch
    import transformers
    from safetensors.torch import load_file, save_file
    from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM,
                              MistralConfig, MistralForCausalLM, MixtralConfig, MixtralForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM)

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    worst = 0.0
    shape = dict(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                 num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                 rms_norm_eps=1e-5, attn_implementation="eager")
    for seed, name in enumerate(("untied", "tied", "mistral", "qwen2", "mixtral")):
        torch.manual_seed(1234 + seed)
        if name == "mixtral":
            config = MixtralConfig(rope_theta=1000000.0, sliding_window=None, num_local_experts=4,
                                   num_experts_per_tok=2, **shape)
            model = MixtralForCausalLM(config).float().eval()
        elif name == "qwen2":
            config = Qwen2Config(rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                                 **shape)
            model = Qwen2ForCausalLM(config).float().eval()
        elif name == "mistral":
            config = MistralConfig(rope_theta=10000.0, sliding_window=128, **shape)
            model = MistralForCausalLM(config).float().eval()
        else:
            config = LlamaConfig(
                rope_theta=500000.0, tie_word_embeddings=name == "tied",
                rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                **shape)
            model = LlamaForCausalLM(config).float().eval()
        with torch.no_grad():  # norms away from 1 (biases from 0) so a mix-up between them shows
            for p in model.parameters():
                if p.dim() == 1:
                    p.add_(0.2 * torch.randn_like(p))
                else:
                    p.mul_(5.0)  # 0.02 init is too flat for a meaningful comparison
        hf_dir = os.path.join(args.work, f"hf_{name}")
        out_root = os.path.join(args.work, f"ours_{name}")
        os.makedirs(hf_dir, exist_ok=True)
        model.save_pretrained(hf_dir, safe_serialization=True)
        if name == "mixtral":
            published_expert_form(hf_dir, load_file, save_file)
        tokens = torch.randint(0, config.vocab_size, (2, 97), dtype=torch.int32)
        save_file({"tokens": tokens}, os.path.join(hf_dir, "case.safetensors"))
        with torch.no_grad():
            theirs = model(tokens.long()).logits.float()
        subprocess.run([args.case_bin, hf_dir, out_root], check=True)
        ours = load_file(os.path.join(out_root, "logits.safetensors"))
        scale = theirs.abs().max().item()
        for key in sorted(ours):
            err = (ours[key] - theirs).abs().max().item() / scale
            worst = max(worst, err)
            print(f"{name}: transformers -> colossal ({key}): {err:.2e}")
        step_dir = os.path.join(out_root, "step_000001")
        back = AutoModelForCausalLM.from_pretrained(step_dir, torch_dtype=torch.float32,
                                                    attn_implementation="eager").eval()
        if type(back) is not type(model) or (
                name == "mistral" and back.config.sliding_window != config.sliding_window):
            print(f"{name}: colossal checkpoint loads as {type(back).__name__} "
                  f"(sliding_window {getattr(back.config, 'sliding_window', None)})")
            worst = float("inf")
        with torch.no_grad():
            again = back(tokens.long()).logits.float()
        err = (again - theirs).abs().max().item() / scale
        worst = max(worst, err)
        print(f"{name}: colossal checkpoint -> transformers ({type(back).__name__}): {err:.2e}")
    print(f"llama parity: worst {worst:.2e} (tolerance {args.tolerance:.0e}): "
          f"{'PASS' if worst < args.tolerance else 'FAIL'}")
    return 0 if worst < args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
