#!/usr/bin/env python3
"""Llama 3 tokenizer ids: transformers' against colossal's, on a fixed mixed-script text.

    # transformers' ids (a machine with `pip install transformers tokenizers`):
    python3 tools/hf/llama3_tokenizer_check.py MODEL_DIR > theirs.json
    # ours (no Python needed):
    bazel build //io/tokenizer:encode_tool
    bazel-bin/io/tokenizer/encode_tool MODEL_DIR > ours.json
    # compare (exit 0 when equal, 1 with the first difference otherwise):
    python3 tools/hf/llama3_tokenizer_check.py MODEL_DIR --ours ours.json

MODEL_DIR holds tokenizer.json (e.g. meta-llama/Meta-Llama-3-8B, read with
AutoTokenizer.from_pretrained, offline: local files only). The text mixes English,
contractions in both cases, digit runs, CJK, Hangul, emoji with modifiers and flags,
tabs, space and newline runs, Greek, Cyrillic, Hebrew, Arabic and Llama 3's special
tokens in the text; it is the same text encode_tool uses (io/tokenizer/encode_tool.cc)
and tools/data/make_llama3_tokenizer_fixture.py's MIXED_TEXT. Printed as JSON:
{"tokenizer", "transformers_version", "ids": tokenizer(text)["input_ids"],
"ids_no_special": tokenizer(text, add_special_tokens=False)["input_ids"]}.
"""
import argparse
import json
import sys

TEXT = ("<|begin_of_text|>Hello, world! I'm sure you'll see THEY'VE said it's 2024-05-20: "
        "1234567 apples cost $3.14159.\n\n日本語のテキストと中文，한국어 too.\r\n"
        "Emoji: 🙂👍🏽 🇫🇷!\tTabs\t\tand   spaces   \n  \n<|eot_id|>Ünïcödé café naïve "
        "Ελληνικά русский עברית العربية ١٢٣٤ ⅻ<|end_of_text|>")


def theirs(model_dir):
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    return {"tokenizer": model_dir, "transformers_version": transformers.__version__,
            "ids": tok(TEXT)["input_ids"], "ids_no_special": tok(TEXT, add_special_tokens=False)["input_ids"]}


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("--ours", help="encode_tool's JSON output, to compare with")
    args = parser.parse_args()
    result = theirs(args.model_dir)
    if not args.ours:
        print(json.dumps(result))
        return 0
    with open(args.ours, encoding="utf-8") as f:
        ours = json.load(f)
    ok = True
    for key in ("ids", "ids_no_special"):
        if ours[key] == result[key]:
            print(f"{key}: equal ({len(ours[key])} ids)")
            continue
        ok = False
        i = first_difference(ours[key], result[key])
        print(f"{key}: differ at index {i}: ours {ours[key][i:i + 8]} transformers {result[key][i:i + 8]} "
              f"(lengths {len(ours[key])} and {len(result[key])})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
