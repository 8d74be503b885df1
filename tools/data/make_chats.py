#!/usr/bin/env python3
"""Seeded synthetic conversations in JSON Lines, the chat format `colossal data prepare
--format chat` reads (for benchmarks of chat fine-tuning; the words are
tools/hf/check_chat_loss.py's):

    python3 tools/data/make_chats.py --count 30000 --seed 3 --out chats.jsonl

Half the conversations open with a system message; each has 1 to 3 user turns of 1 to 12
words, each answered by 1 to 30.
"""
import argparse
import json
import random

WORDS = ["the", "model", "answers", "Zürich", "42", "what", "is", "why?", "東京", "fine", "ok", "no"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=30000)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with open(args.out, "w", encoding="utf-8") as f:
        for _ in range(args.count):
            conv = [{"role": "system", "content": "Be brief."}] if rng.random() < 0.5 else []
            for _ in range(rng.randint(1, 3)):
                conv.append({"role": "user", "content": " ".join(rng.choices(WORDS, k=rng.randint(1, 12)))})
                conv.append({"role": "assistant", "content": " ".join(rng.choices(WORDS, k=rng.randint(1, 30)))})
            f.write(json.dumps({"messages": conv}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
