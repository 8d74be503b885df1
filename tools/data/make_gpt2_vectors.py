#!/usr/bin/env python3
"""Generates byte-exactness test vectors for io/tokenizer from tiktoken itself.

    # GPT-2's real ranks (tools/data/fetch_gpt2_ranks.sh installs them):
    python3 tools/data/make_gpt2_vectors.py --ranks ~/.cache/colossal/data/gpt2.tiktoken \\
        --out io/tokenizer/testdata/gpt2_vectors.json
    # the tiny hand-made vocabulary (tools/data/make_tiny_vocab.py), for tests
    # that run everywhere:
    python3 tools/data/make_gpt2_vectors.py --ranks io/tokenizer/testdata/tiny.tiktoken \\
        --alphabet tiny --out io/tokenizer/testdata/tiny_vectors.json

Needs `pip install tiktoken`; no network: the encoding is built from the local
ranks file with GPT-2's pattern and <|endoftext|> = 50256, exactly like
tiktoken's "gpt2" encoding. Each case records, for one text:
  ordinary  encode_ordinary(text)
  allow     encode(text, allowed_special="all")
  rejects   whether encode(text) (tiktoken's default) raises for a special token
The texts: curated cases (Unicode scripts, CJK, emoji, combining marks, white
space runs, contractions, numbers, code, long words, the empty string,
<|endoftext|> handling) and seeded random strings over characters of every
class the pattern distinguishes. Unicode: tiktoken's regex engine decides
letters/numbers; avoid code points newer than its Unicode version (16.0 for
tiktoken 0.14) in curated cases.
"""
import argparse
import hashlib
import json
import random

import tiktoken
import tiktoken.load

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"

CURATED = [
    ("empty", ""),
    ("hello", "Hello world"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("contractions", "I'm sure you'll see they've said we'd go, it's John's and don't"),
    ("contractions_upper", "DON'T I'M YOU'LL It'S"),
    ("apostrophes", "'s 's ''s ' s rock 'n' roll '''"),
    ("numbers", "1 12 123 1234 12345 3.14159 1,000,000 -42 +7e10 0x1F 2024-05-20"),
    ("unicode_numbers", "٣٤٥ ०१२ ²³ ½ ¾ Ⅻ ⅷ ① 〇 𝟘𝟙"),
    ("spaces_2", "a  b"),
    ("spaces_3", "a   b"),
    ("spaces_many", "a" + " " * 17 + "b"),
    ("leading_spaces", "   leading"),
    ("trailing_spaces", "trailing   "),
    ("only_spaces", "     "),
    ("one_space", " "),
    ("newlines", "a\nb\n\nc\n\n\nd\n"),
    ("space_newline_mix", "a \n b\n \n c \n\n d  \n"),
    ("tabs", "\tindented\n\t\tdouble\t tab \t"),
    ("crlf", "line one\r\nline two\r\n\r\n"),
    ("unicode_spaces", "no\u00a0break thin\u2009space ideographic\u3000space em\u2003x \u2028 \u2029 \u0085 end"),
    ("not_spaces", "zero\u200bwidth bom\ufeffx sep\x1c\x1d\x1e\x1f nul\x00 bell\x07"),
    ("space_before_punct", "a , b . c ! d ? ( e ) [f] {g}"),
    ("punct_runs", "!!! ??? ... --- ::: ;;; ~~~ @#$%^&*"),
    ("cjk_chinese", "你好，世界。今天天气很好！"),
    ("cjk_japanese", "日本語のテキストとカタカナ、ひらがな。"),
    ("korean", "안녕하세요 세계"),
    ("emoji", "I ❤️ Unicode 🙂👍🏽 🇫🇷 👨‍👩‍👧‍👦 🤖🚀"),
    ("combining", "e\u0301 n\u0303 a\u0308 Z\u0351\u0300\u0317a\u036bl\u0345g\u0316o cafe\u0301"),
    ("precomposed", "café naïve résumé Ångström Æsir ß"),
    ("greek_cyrillic", "Καλημέρα κόσμε Здравствуй мир"),
    ("arabic_hebrew", "مرحبا بالعالم שלום עולם"),
    ("indic", "नमस्ते दुनिया வணக்கம்"),
    ("thai", "สวัสดีชาวโลก"),
    ("math_symbols", "∀x∈ℝ: x² ≥ 0 ∑ ∫ √2 ≈ 1.414 π"),
    ("python", "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n"),
    ("cpp", "int main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x += 1;\n}\n"),
    ("json", '{"key": [1, 2.5, "three"], "nested": {"a": null, "b": true}}'),
    ("url_email", "https://example.com/path?q=1&r=two#frag user.name+tag@example.org"),
    ("mixed_case", "camelCaseWord snake_case_word SCREAMING_CASE kebab-case"),
    ("letters_digits", "abc123def456 v1.2.3 GPT2 x86_64 utf8"),
    ("long_word", "a" * 1000),
    ("long_digits", "9" * 300),
    ("long_letters", "abcdefghijklmnopqrstuvwxyz" * 20),
    ("long_punct", "=-" * 200),
    ("long_spaces", " " * 300 + "x"),
    ("hex_blob", "0123456789abcdef" * 16),
    ("eot_alone", EOT),
    ("eot_inside", "Hello" + EOT + "world"),
    ("eot_spaces", "end.  " + EOT + "  Start"),
    ("eot_twice", EOT + EOT),
    ("eot_partial", "<|endoftext|" + " <|endoftext " + "<|endoftext|>x"),
    ("eot_newline", "doc one\n" + EOT + "\ndoc two"),
]

# Characters of every class the pattern tells apart, for random strings.
GPT2_ALPHABET = list("abcxyzABCXYZ0189 ' '\n\t\r.,!?-_()\"'#/@") + [
    "s", "t", "re", "ve", "m", "ll", "d", "'s", "'t", "'ll", "é", "ß", "ñ", "中", "文", "の", "カ", "한",
    "Ж", "λ", "ا", "א", "न", "्", "\u0301", "٣", "²", "½", "Ⅻ", "🙂", "👍", "\u200d", "\u00a0",
    "\u3000", "\u2009", "\u2028", "\u0085", "\u200b", "\ufeff", "\x00", "\x1c", "€", "™", "→", "  ", "\n\n",
    " the", " of", " and", "ing", "tion",
]
TINY_ALPHABET = ["a", "b", "s", "t", "1", "2", " ", "\n", "\t", "!", "'", "中", "é", "\u00a0", "c", "3",
                 "٣", "\u0301", "🙂", "\u3000", "\r", "Z", "'s", "'ll", "  ", "?"]


def random_texts(alphabet, count, seed):
    rng = random.Random(seed)
    out = []
    for i in range(count):
        n = rng.choice([1, 2, 3, 5, 8, 13, 21, 40, 80])
        out.append((f"random_{i}", "".join(rng.choice(alphabet) for _ in range(n))))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", required=True, help="a tiktoken ranks file")
    parser.add_argument("--out", required=True)
    parser.add_argument("--alphabet", choices=["gpt2", "tiny"], default="gpt2")
    parser.add_argument("--random", type=int, default=300, help="number of random strings")
    parser.add_argument("--seed", type=int, default=20240520)
    args = parser.parse_args()

    ranks_bytes = open(args.ranks, "rb").read()
    enc = tiktoken.Encoding(name="colossal_vectors", pat_str=GPT2_PATTERN,
                            mergeable_ranks=tiktoken.load.load_tiktoken_bpe(args.ranks),
                            special_tokens={EOT: 50256})
    # tiktoken's own spelling of the pattern (possessive, split \s alternatives)
    # must agree with GPT-2's original one on every text.
    try:
        from tiktoken_ext.openai_public import r50k_pat_str
    except ImportError:
        r50k_pat_str = None
    enc_r50k = r50k_pat_str and tiktoken.Encoding(
        name="colossal_vectors_r50k", pat_str=r50k_pat_str,
        mergeable_ranks=tiktoken.load.load_tiktoken_bpe(args.ranks), special_tokens={EOT: 50256})

    alphabet = GPT2_ALPHABET if args.alphabet == "gpt2" else TINY_ALPHABET
    cases = []
    for name, text in CURATED + random_texts(alphabet, args.random, args.seed):
        ordinary = enc.encode_ordinary(text)
        if enc_r50k is not None:
            assert enc_r50k.encode_ordinary(text) == ordinary, name
        try:
            enc.encode(text)
            rejects = False
        except ValueError:
            rejects = True
        allow = enc.encode(text, allowed_special="all")
        assert enc.decode_bytes(ordinary) == text.encode("utf-8"), name
        cases.append({"name": name, "text": text, "ordinary": ordinary, "allow": allow, "rejects": rejects})

    meta = {
        "generator": "tools/data/make_gpt2_vectors.py",
        "tiktoken_version": tiktoken.__version__,
        "ranks_file_sha256": hashlib.sha256(ranks_bytes).hexdigest(),
        "pattern": GPT2_PATTERN,
        "special_tokens": {EOT: 50256},
        "alphabet": args.alphabet,
        "seed": args.seed,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        f.write('{\n"meta": ' + json.dumps(meta, ensure_ascii=False) + ',\n"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]\n}\n")
    print(f"wrote {args.out}: {len(cases)} cases, tiktoken {tiktoken.__version__}")


if __name__ == "__main__":
    main()
