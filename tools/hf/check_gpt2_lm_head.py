#!/usr/bin/env python3
"""transformers' GPT2LMHeadModel loads our checkpoint and its logits match ours (issue #7).

    bazel run //tools/hf:write_gpt2_logits_case -- /tmp/hf_case
    python3 tools/hf/check_gpt2_lm_head.py /tmp/hf_case/step_000001 /tmp/hf_case/logits.safetensors

The step directory is written by io/checkpoint (SaveCheckpoint); the logits file
holds the fixed tokens (I32 [B, T]) and colossal's float32 logits for them
(F32 [B, T, padded_vocab]; tools/hf/write_gpt2_logits_case.cc). This script first
runs tools/hf/check_hf_checkpoint.py's checks on the folder (every tensor
under GPT-2's Hugging Face names and shapes, and every weight equal after
GPT2LMHeadModel.from_pretrained), then runs the model in float32 on the same
tokens and prints

    max |hf - ours| / max |hf|        over the real vocabulary

Exit status 1 when that is 1e-4 or more (--tolerance), or a check fails; 0 otherwise.
Needs torch, transformers, safetensors and numpy. --device cuda runs the model on
the GPU (TF32 off, so the comparison stays float32).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_hf_checkpoint  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step_dir", help="checkpoint step directory (config.json, model*.safetensors)")
    parser.add_argument("logits", help="safetensors file with 'tokens' and colossal's 'logits'")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()

    import torch
    import transformers
    from safetensors.numpy import load_file
    from transformers import GPT2LMHeadModel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {args.device}")

    # Names, shapes, finite values, and from_pretrained's weights equal to the files'.
    check_hf_checkpoint.main(args.step_dir)

    model = GPT2LMHeadModel.from_pretrained(args.step_dir).float().to(args.device).eval()
    case = load_file(args.logits)
    tokens, ours = case["tokens"], case["logits"]
    vocab = model.config.vocab_size
    if tokens.ndim != 2 or ours.shape[:2] != tokens.shape or ours.shape[2] < vocab:
        print(f"FAIL: logits {ours.shape} do not fit tokens {tokens.shape} and vocab_size {vocab}")
        return 1
    if ours.shape[2] > vocab and np.any(ours[..., vocab:] != 0):
        print(f"note: our padded logit columns {vocab}..{ours.shape[2] - 1} are not all zero")
    with torch.no_grad():
        hf = model(torch.from_numpy(tokens.astype(np.int64)).to(args.device)).logits
    hf = hf.float().cpu().numpy()
    ours = ours[..., :vocab].astype(np.float32)
    if hf.shape != ours.shape:
        print(f"FAIL: transformers' logits {hf.shape}, ours {ours.shape}")
        return 1
    scale = float(np.abs(hf).max())
    err = float(np.abs(hf.astype(np.float64) - ours).max()) / scale
    ok = np.isfinite(err) and err < args.tolerance
    print(f"logits {list(hf.shape)}: max |hf - ours| / max |hf| = {err:.3e} (max |hf| {scale:.4g}); "
          f"tolerance {args.tolerance:g}: {'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
