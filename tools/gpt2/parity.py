#!/usr/bin/env python3
"""Checks colossal's GPT-2 forward and backward against PyTorch (issue #6).

    bazel run //nn/models/gpt2:export_parity_case -- /tmp/parity.safetensors
    python3 tools/gpt2/parity.py /tmp/parity.safetensors

The file (nn/models/gpt2/export_parity_case.cc documents it) holds a tiny
GPT-2's weights, tokens and targets, and colossal's float32 logits, loss and
parameter gradients from each device it ran on ("cpu", and "cuda" on a GPU
host). This script rebuilds the model in PyTorch from those weights, as
Hugging Face's GPT-2 computes it (pre-LN blocks, LayerNorm eps 1e-5, tanh GELU,
explicit causal softmax attention, Conv1D weights [in, out], LM head tied to
wte), runs forward + backward in float64 (the reference) and in float32 on the
CPU, and prints per tensor

    max |x - ref| / max |ref|

for colossal on each device and for PyTorch float32 (how far a float32
implementation lands anyway). Exit status 1 when any colossal tensor's error is
1e-5 or more, 0 otherwise. Needs only torch (the file is parsed here).
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

TOLERANCE = 1e-5
DTYPES = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32}


def read_safetensors(path):
    """(tensors by name, metadata) of a safetensors file of F32/F64/I32 tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        data = bytearray(raw[base + begin : base + end])
        t = torch.frombuffer(data, dtype=DTYPES[info["dtype"]]) if data else torch.empty(0)
        tensors[name] = t.reshape(info["shape"])
    return tensors, meta


def gpt2_loss(p, tokens, targets, cfg):
    """logits [B, T, Vp] and mean cross-entropy over the real vocabulary."""
    L, NH, C, V = cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["vocab_size"]
    B, T = tokens.shape
    hs = C // NH
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][:T]
    for i in range(L):
        h = lambda n: p[f"transformer.h.{i}.{n}"]  # noqa: E731
        a = F.layer_norm(x, (C,), h("ln_1.weight"), h("ln_1.bias"), eps=1e-5)
        q, k, v = (a @ h("attn.c_attn.weight") + h("attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ h("attn.c_proj.weight") + h("attn.c_proj.bias")
        m = F.layer_norm(x, (C,), h("ln_2.weight"), h("ln_2.bias"), eps=1e-5)
        m = F.gelu(m @ h("mlp.c_fc.weight") + h("mlp.c_fc.bias"), approximate="tanh")
        x = x + m @ h("mlp.c_proj.weight") + h("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps=1e-5)
    logits = x @ p["transformer.wte.weight"].t()
    loss = F.cross_entropy(logits[..., :V].reshape(B * T, V), targets.reshape(B * T).long())
    return logits, loss


def torch_run(params, tokens, targets, cfg, dtype):
    """{"logits", "loss", "grads.<name>"} computed by PyTorch in `dtype`."""
    p = {n: w.detach().to(dtype, copy=True).requires_grad_() for n, w in params.items()}
    logits, loss = gpt2_loss(p, tokens.long(), targets, cfg)
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach()}
    out.update({f"grads.{n}": w.grad for n, w in p.items()})
    return out


def rel_error(x, ref):
    ref = ref.double()
    scale = ref.abs().max().item() if ref.numel() else 0.0
    return (x.double() - ref).abs().max().item() / max(scale, 1e-30)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: parity.py CASE.safetensors (from //nn/models/gpt2:export_parity_case)")
    tensors, meta = read_safetensors(sys.argv[1])
    cfg = json.loads(meta["config"])
    devices = meta["devices"].split(",")
    params = {n[len("params.") :]: t for n, t in tensors.items() if n.startswith("params.")}
    torch.manual_seed(0)
    ref = torch_run(params, tensors["tokens"], tensors["targets"], cfg, torch.float64)
    f32 = torch_run(params, tensors["tokens"], tensors["targets"], cfg, torch.float32)
    print(f"torch {torch.__version__}; config {cfg}; colossal ran on {', '.join(devices)}")
    print(f"loss: reference (float64) {ref['loss'].item():.9f}, "
          + ", ".join(f"colossal {d} {tensors[d + '.loss'].item():.9f}" for d in devices))
    cols = [f"colossal {d}" for d in devices] + ["torch f32"]
    print(f"{'tensor':<40}" + "".join(f"{c:>16}" for c in cols))
    worst = {d: 0.0 for d in devices}
    for name in ref:
        errs = [rel_error(tensors[f"{d}.{name}"], ref[name]) for d in devices]
        for d, e in zip(devices, errs):
            worst[d] = max(worst[d], e)
        errs.append(rel_error(f32[name], ref[name]))
        flag = "  <-- FAIL" if any(e >= TOLERANCE for e in errs[:-1]) else ""
        print(f"{name:<40}" + "".join(f"{e:>16.3e}" for e in errs) + flag)
    ok = all(e < TOLERANCE for e in worst.values())
    for d in devices:
        print(f"colossal {d}: worst relative error {worst[d]:.3e} (tolerance {TOLERANCE:g})")
    print("parity: " + ("PASSED" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
