#!/usr/bin/env python3
"""Chat fine-tuning's loss against transformers, run on the GPU host (torch,
transformers, safetensors; nothing downloaded).

    python3 tools/hf/check_chat_loss.py --colossal BUNDLE/bin/lua_colossal --work /tmp/chat_check

1. transformers saves a tiny random Qwen2ForCausalLM (float32) with the Qwen2 fixture
   tokenizer (io/tokenizer/testdata/qwen2_tiny) and a ChatML chat_template;
2. `colossal data prepare --format chat` tokenizes 200 seeded conversations with it;
3. `colossal tools/bench/chat_loss.lua` prints the float32 loss of the first batches
   (file order): packed windows attending across their conversations, packed windows
   attending within each (document_attention; colossal on the CPU, whose reference
   kernels run float32, and on the GPU in bf16, whose fused kernels take 16-bit types
   only), and one conversation a row (packing = false);
4. the same rows are rebuilt here from the shards and their .mask files as the format
   says (bit 0: the loss counts the target, bit 1: a conversation starts), and
   transformers' logits give the mean cross-entropy over the counted targets
   (ignore_index -100), which must equal colossal's (relative 1e-4, --tolerance; bf16
   within --bf16_tolerance). Within conversations, transformers runs each
   conversation's piece of a row on its own (positions from 0).
It also checks the prepared ids against transformers' apply_chat_template.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np

CHATML = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def read_array(path, dtype, header_ints=256):
    raw = np.fromfile(path, dtype=np.uint8)
    header = raw[:header_ints * 4].view(np.int32)
    return header, raw[header_ints * 4:].view(dtype)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--colossal", required=True)
    parser.add_argument("--work", default="/tmp/chat_check")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--bf16_tolerance", type=float, default=2e-2)
    args = parser.parse_args()
    import torch
    import transformers
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    shutil.rmtree(args.work, ignore_errors=True)
    model_dir = os.path.join(args.work, "qwen2")
    torch.manual_seed(7)
    # Heads of 64: the size the fused GPU kernels take (bf16 within conversations).
    config = Qwen2Config(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                         attn_implementation="eager")
    model = Qwen2ForCausalLM(config).float().eval()
    model.save_pretrained(model_dir, safe_serialization=True)
    fixture = os.path.join(root, "io/tokenizer/testdata/qwen2_tiny")
    shutil.copy(os.path.join(fixture, "tokenizer.json"), model_dir)
    with open(os.path.join(fixture, "tokenizer_config.json")) as f:
        tok_config = json.load(f)
    tok_config["chat_template"] = CHATML
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f)

    rng = random.Random(3)
    words = ["the", "model", "answers", "Zürich", "42", "what", "is", "why?", "東京", "fine", "ok", "no"]
    conversations = []
    for _ in range(200):
        conv = [{"role": "system", "content": "Be brief."}] if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 3)):
            conv.append({"role": "user", "content": " ".join(rng.choices(words, k=rng.randint(1, 12)))})
            conv.append({"role": "assistant", "content": " ".join(rng.choices(words, k=rng.randint(1, 30)))})
        conversations.append(conv)
    chats = os.path.join(args.work, "chats.jsonl")
    with open(chats, "w") as f:
        for conv in conversations:
            f.write(json.dumps({"messages": conv}, ensure_ascii=False) + "\n")
    out = os.path.join(args.work, "sft")
    subprocess.run([args.colossal, "data", "prepare", "--input", chats, "--output", out, "--format", "chat",
                    "--tokenizer", model_dir, "--val_fraction", "0", "--name", "sft"], check=True)
    _, ids = read_array(os.path.join(out, "sft_train_000000.bin"), np.uint16)
    _, flags = read_array(os.path.join(out, "sft_train_000000.mask"), np.uint8)
    assert len(ids) == len(flags)

    tok = AutoTokenizer.from_pretrained(model_dir)
    want = []
    for conv in conversations:
        want += list(tok.apply_chat_template(conv, tokenize=True, return_dict=False))
    ids_equal = list(ids.astype(np.int64)) == want
    print(f"prepared ids equal apply_chat_template's over {len(conversations)} conversations: {ids_equal}")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device)
    # Rows of 256 tokens: a packed row holds the end of one conversation and the start of the next.
    B, T, batches = 2, 256, 4
    starts = np.nonzero(flags & 2)[0]
    worst, worst_bf16, ok = 0.0, 0.0, ids_equal
    # (packing, document_attention, precision, colossal on the GPU)
    modes = [(True, False, "fp32", True), (True, True, "fp32", False), (False, False, "fp32", True)]
    if device == "cuda":
        modes.append((True, True, "bf16", True))
    for packing, within, precision, on_gpu in modes:
        rows = []
        if packing:
            for w in range(B * batches):
                rows.append((ids[w * T:w * T + T + 1].astype(np.int64), flags[w * T:w * T + T + 1]))
        else:
            for d in range(B * batches):
                end = starts[d + 1] if d + 1 < len(starts) else len(ids)
                n = min(end - starts[d], T + 1)
                rows.append((ids[starts[d]:starts[d] + n].astype(np.int64), flags[starts[d]:starts[d] + n]))
        env = dict(os.environ)
        if not on_gpu:
            env["CUDA_VISIBLE_DEVICES"] = ""
        result = subprocess.run([args.colossal, os.path.join(root, "tools/bench/chat_loss.lua"),
                                 "--set", f"model={model_dir}", "--set", f"pattern={out}/sft_train_*.bin",
                                 "--set", f"packing={'true' if packing else 'false'}", "--set", f"batches={batches}",
                                 "--set", f"micro_batch_size={B}", "--set", f"seq_len={T}",
                                 "--set", f"document_attention={'true' if within else 'false'}",
                                 "--set", f"precision={precision}"],
                                capture_output=True, text=True, env=env)
        if result.returncode != 0:
            print(result.stdout[-2000:], result.stderr[-2000:])
            sys.exit(1)
        ours = [json.loads(line)["loss"] for line in result.stdout.splitlines() if line.startswith('{"batch"')]
        for b in range(batches):
            inputs = torch.zeros(B, T, dtype=torch.long)
            targets = torch.full((B, T), -100, dtype=torch.long)
            for r in range(B):
                tokens, f = rows[b * B + r]
                n = len(tokens)
                inputs[r, :min(n, T)] = torch.from_numpy(tokens[:T])
                for t in range(min(n - 1, T)):
                    if f[t + 1] & 1:
                        targets[r, t] = int(tokens[t + 1])
            starts_inside = 0
            with torch.no_grad():
                logits = model(inputs.to(device)).logits.float()
                if within:
                    # Each conversation's piece of a row on its own: the row's first token
                    # and every flagged conversation start begin one.
                    for r in range(B):
                        tokens, f = rows[b * B + r]
                        cuts = [0] + [t for t in range(1, min(len(tokens), T)) if f[t] & 2] + [T]
                        starts_inside += len(cuts) - 2
                        for lo, hi in zip(cuts, cuts[1:]):
                            logits[r, lo:hi] = model(inputs[r:r + 1, lo:hi].to(device)).logits.float()[0]
            theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                       targets.to(device).reshape(-1), ignore_index=-100).item()
            err = abs(ours[b] - theirs) / abs(theirs)
            if precision == "bf16":
                worst_bf16 = max(worst_bf16, err)
            else:
                worst = max(worst, err)
            counted = int((targets != -100).sum())
            inside = f", {starts_inside} conversations start inside its rows" if within else ""
            print(f"packing={packing!s:5} within={within!s:5} {precision} {'gpu' if on_gpu and device == 'cuda' else 'cpu'}"
                  f" batch {b + 1}: colossal {ours[b]:.6f}  transformers {theirs:.6f}  "
                  f"rel {err:.2e}  ({counted} of {B * T} targets counted{inside})")
    ok = ok and worst < args.tolerance and worst_bf16 < args.bf16_tolerance
    print(f"worst relative difference {worst:.2e} (float32), {worst_bf16:.2e} (bf16): {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
