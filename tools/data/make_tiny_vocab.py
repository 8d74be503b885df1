#!/usr/bin/env python3
"""Writes the tiny hand-made GPT-2-style vocabulary used by io/tokenizer tests:

    io/tokenizer/testdata/tiny.tiktoken      tiktoken format (base64 token, rank)
    io/tokenizer/testdata/tiny_encoder.json  the same ranks as encoder.json ...
    io/tokenizer/testdata/tiny_vocab.bpe     ... + vocab.bpe (GPT-2's "data gym" pair)

Ranks 0..255 are the 256 bytes in GPT-2's byte-encoder order (as in GPT-2),
then one rank per merge below, in order. The merges are chosen to test:
merge order by rank (not position), leftmost merge on ties, multi-level merges,
partial UTF-8 tokens (so decode must join bytes across tokens), and, through
every pair over a small alphabet, piece boundaries: two neighbouring
characters merge exactly when the pre-tokeniser put them in one piece.

    python3 tools/data/make_tiny_vocab.py
"""
import base64
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "..", "io", "tokenizer", "testdata"))

# (left, right) as text; each side must already be a token.
NAMED_MERGES = [
    ("h", "e"), (" ", "t"), (" t", "he"), ("l", "l"), ("he", "ll"), ("hell", "o"), (" ", "hello"),
    ("b", "c"), ("a", "b"),            # "abc" -> "a" "bc": rank order, not left to right
    ("a", "a"), ("aa", "aa"),          # "aaa" -> "aa" "a": leftmost on ties
    ("1", "2"), ("12", "3"),
    ("'", "s"), ("'", "t"), ("'", "ll"),
    ("i", "n"), ("in", "g"), (" ", "s"),
    ("!", "!"), ("(", ")"), ("=", "="),
    ("\n", "\n"), (" ", " "), ("  ", "  "),
]
# Multi-byte characters built from partial tokens: 中 = e4 b8 ad, é = c3 a9, NBSP = c2 a0,
# 🙂 = f0 9f 99 82 (only "\xf0\x9f" merges: the emoji stays in parts).
BYTE_MERGES = [
    (b"\xe4", b"\xb8"), (b"\xe4\xb8", b"\xad"),
    (b"\xc3", b"\xa9"), (b"\xc2", b"\xa0"),
    (b"\xf0", b"\x9f"),
]
# Every pair over this alphabet merges (unless already a token).
PAIR_ALPHABET = ["a", "b", "s", "t", "1", "2", " ", "\n", "\t", "!", "'", "中", "é", "\u00a0"]


def bytes_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + n)
            n += 1
    return mapping


def main():
    enc = bytes_to_unicode()
    base = sorted(range(256), key=lambda b: ord(enc[b]))  # GPT-2's rank order of the bytes
    ranks = {bytes([b]): r for r, b in enumerate(base)}
    merges = []

    def merge(left, right):
        left = left.encode() if isinstance(left, str) else left
        right = right.encode() if isinstance(right, str) else right
        assert left in ranks and right in ranks, (left, right)
        if left + right in ranks:
            return
        ranks[left + right] = len(ranks)
        merges.append((left, right))

    for left, right in NAMED_MERGES:
        merge(left, right)
    for left, right in BYTE_MERGES:
        merge(left, right)
    for left in PAIR_ALPHABET:
        for right in PAIR_ALPHABET:
            merge(left, right)

    def gym(b):
        return "".join(enc[x] for x in b)

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tiny.tiktoken"), "w") as f:
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    encoder = {gym(token): rank for token, rank in ranks.items()}
    encoder["<|endoftext|>"] = len(ranks)
    with open(os.path.join(OUT, "tiny_encoder.json"), "w", encoding="utf-8") as f:
        json.dump(encoder, f, ensure_ascii=False, indent=0)
        f.write("\n")
    with open(os.path.join(OUT, "tiny_vocab.bpe"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for left, right in merges:
            f.write(f"{gym(left)} {gym(right)}\n")
    print(f"wrote {OUT}/tiny.*: {len(ranks)} ranks, {len(merges)} merges")


if __name__ == "__main__":
    main()
