#!/usr/bin/env python3
"""Checks a colossal GPT-2 checkpoint with Hugging Face's own libraries (not run in CI).

    bazel run //nn/train:write_tiny_checkpoint -- /tmp/tiny_ckpt
    python3 tools/hf/check_hf_checkpoint.py /tmp/tiny_ckpt/step_000001

Needs `safetensors` and `numpy`: every tensor loads, under GPT-2's Hugging Face
names, with the shapes config.json implies (wte without padding rows, Conv1D
weights [in, out]). If `torch` and `transformers` are importable it also loads
the folder with GPT2LMHeadModel.from_pretrained and compares every weight.
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file


def load_tensors(step_dir):
    index = os.path.join(step_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        tensors.update(load_file(os.path.join(step_dir, name)))
    return tensors


def expected_shapes(cfg):
    c, v, t = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    shapes = {"transformer.wte.weight": (v, c), "transformer.wpe.weight": (t, c),
              "transformer.ln_f.weight": (c,), "transformer.ln_f.bias": (c,)}
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        shapes.update({
            p + "ln_1.weight": (c,), p + "ln_1.bias": (c,),
            p + "attn.c_attn.weight": (c, 3 * c), p + "attn.c_attn.bias": (3 * c,),
            p + "attn.c_proj.weight": (c, c), p + "attn.c_proj.bias": (c,),
            p + "ln_2.weight": (c,), p + "ln_2.bias": (c,),
            p + "mlp.c_fc.weight": (c, 4 * c), p + "mlp.c_fc.bias": (4 * c,),
            p + "mlp.c_proj.weight": (4 * c, c), p + "mlp.c_proj.bias": (c,),
        })
    return shapes


def main(step_dir):
    with open(os.path.join(step_dir, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["architectures"] == ["GPT2LMHeadModel"] and cfg["model_type"] == "gpt2", cfg
    tensors = load_tensors(step_dir)
    want = expected_shapes(cfg)
    assert set(tensors) == set(want), sorted(set(tensors) ^ set(want))
    for name, shape in want.items():
        assert tensors[name].shape == shape, (name, tensors[name].shape, shape)
        assert np.isfinite(tensors[name]).all(), name
    print(f"safetensors {len(tensors)} tensors: names and shapes OK")
    try:
        import torch  # noqa: F401
        from transformers import GPT2LMHeadModel
    except ImportError:
        print("torch/transformers not installed: from_pretrained not checked")
        return 0
    model = GPT2LMHeadModel.from_pretrained(step_dir)
    state = model.state_dict()
    for name, value in tensors.items():
        assert np.array_equal(state[name].numpy(), value), name
    assert np.array_equal(state["lm_head.weight"].numpy(), tensors["transformer.wte.weight"])
    print("transformers GPT2LMHeadModel.from_pretrained: every weight equal")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
