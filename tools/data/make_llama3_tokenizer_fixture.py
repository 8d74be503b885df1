#!/usr/bin/env python3
"""Generates the tokenizer.json / tokenizer.model fixtures of io/tokenizer and their expected ids.

    python3 -m venv /tmp/hf && /tmp/hf/bin/pip install tokenizers transformers sentencepiece protobuf
    /tmp/hf/bin/python tools/data/make_llama3_tokenizer_fixture.py --out io/tokenizer/testdata

Writes, under --out:
  llama3_tiny/tokenizer.json   a small Llama-3-style tokenizer: byte-level BPE trained here
                               on a mixed-script text, Llama-3's Split pattern + ByteLevel
                               pre-tokenizer, ignore_merges, BOS added by a TemplateProcessing
                               post-processor, Llama-3's special tokens after the vocabulary;
                               merges as ["a", "b"] pairs (what tokenizers writes today)
  llama3_tiny/tokenizer_config.json   as transformers writes it for that tokenizer
  llama3_tiny_vectors.json     per text: ids with and without special tokens (BOS) and
                               the decoded text, from `tokenizers`; transformers' ids too
  llama3_split_vectors.json    Llama-3's pattern alone (Split, isolated): text -> pieces
  gpt2_tiny/tokenizer.json     a small GPT-2-style tokenizer.json (ByteLevel pre-tokenizer
                               with GPT-2's regex, no BOS); merges as "a b" strings (the
                               older form)
  gpt2_tiny_vectors.json       its expected ids
  spm_tiny/tokenizer.model     a Llama-2-style SentencePiece BPE model (byte_fallback,
                               <unk> <s> </s> = 0 1 2, add_dummy_prefix), trained here
  spm_tiny_vectors.json        ids from the sentencepiece library, without and with BOS
                               (Llama-2's LlamaTokenizer prepends it: add_bos_token)
  qwen2_tiny/tokenizer.json    a small Qwen2-style tokenizer: NFC normalizer, Qwen2's Split
                               pattern (one number a piece) + ByteLevel, no BOS, ByteLevel
                               post-processor, <|endoftext|> <|im_start|> <|im_end|> after
                               the vocabulary (normalized false), ignore_merges false
  qwen2_tiny/tokenizer_config.json   as transformers writes it (eos <|endoftext|>, no bos)
  qwen2_tiny_vectors.json      per text: ids, decoded text, and the text's NFC form
  qwen2_split_vectors.json     Qwen2's pattern alone: text -> pieces
`--only NAME` (llama3, gpt2, spm, qwen2) writes one family's files and leaves the others.
Every random choice is seeded; running it twice gives the same files with the same
library versions (recorded in each vectors file's "meta").
"""
import argparse
import io
import json
import os
import random

import sentencepiece as spm
import tokenizers
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>"]

# The mixed-script text (also tools/hf/llama3_tokenizer_check.py's): English,
# contractions in both cases, digit runs, CJK, emoji, newlines, special tokens.
MIXED_TEXT = ("<|begin_of_text|>Hello, world! I'm sure you'll see THEY'VE said it's 2024-05-20: "
              "1234567 apples cost $3.14159.\n\n日本語のテキストと中文，한국어 too.\r\n"
              "Emoji: 🙂👍🏽 🇫🇷!\tTabs\t\tand   spaces   \n  \n<|eot_id|>Ünïcödé café naïve "
              "Ελληνικά русский עברית العربية ١٢٣٤ ⅻ<|end_of_text|>")

TRAINING_TEXT = """
The quick brown fox jumps over the lazy dog. I'm sure you'll see they've said we'd go.
It's John's book, and don't forget: THE END. She'll say I'd rather not; we're done.
Numbers: 1 12 123 1234 12345 3.14159 1,000,000 -42 2024-05-20 0x1F 100% $19.99
def main():\n    return {"key": [1, 2, 3]}  # code\n\tif x == y:\n\t\tprint(x)
日本語のテキストです。中文的文本，你好世界。한국어 텍스트입니다.
Emoji 🙂👍🏽🇫🇷🎉 and symbols ©®™ → ← ∑∫ ≠ ≤ ≥ « » … — –
Ünïcödé café naïve résumé façade jalapeño Ελληνικά русский язык עברית العربية हिन्दी
Hello world! Hello, World? HELLO WORLD. hello world... the the the and and of of to to in
""" * 3

# Texts for the vectors: one per alternative of the pattern and its corners, plus seeded random ones.
CASES = [
    ("empty", ""),
    ("mixed_script", MIXED_TEXT),
    ("hello", "Hello world"),
    ("contractions", "I'm you'll they've we'd she's can't we're"),
    ("contractions_upper", "I'M YOU'LL THEY'VE WE'D SHE'S CAN'T WE'RE It'S"),
    ("contraction_long_s", "it'\u017f ok '\u017fs IT'\u017f"),
    ("apostrophes", "'s''s 'sx 'l 'll's rock 'n' roll '''"),
    ("letters_prefix", "(hello) [world] \"quoted\" .Dot ,comma \tTab \u00a0nbsp"),
    ("digits", "1 12 123 1234 12345 1234567 3.14159 1,000,000 ٣٤٥٦ ²³½ Ⅻ"),
    ("digits_letters", "abc123def4567ghi"),
    ("punct_newlines", "Hi!\n\nWhat?!\r\n\r\nOK...\n end"),
    ("space_punct", "a !b  ?c ... d"),
    ("newline_runs", "a\n\nb\r\n\r\nc \n \n d\n   \n"),
    ("whitespace_runs", "a  b   c\t\td    "),
    ("trailing_space", "end "),
    ("only_spaces", "    "),
    ("only_newlines", "\n\n\n"),
    ("cjk", "日本語のテキストと中文，你好世界。"),
    ("emoji", "🙂👍🏽 ok 🇫🇷! 🎉🎉"),
    ("combining", "e\u0301t\u00e9 n\u0303"),
    ("special_tokens", "<|begin_of_text|>Hi<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nx<|end_of_text|>"),
    ("special_adjacent", "a<|eot_id|><|eot_id|>b <|eot_id|> c"),
    ("special_partial", "<|eot_id <|begin_of_text| |eot_id|>"),
    ("control_chars", "a\x1cb\x1fc\x0bd\x0ce\x85f"),
    ("code", "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n"),
]

SPLIT_CASES = [
    ("contraction_lower", "it's I'm you're we've I'll he'd don't"),
    ("contraction_upper", "IT'S I'M YOU'RE WE'VE I'LL HE'D DON'T"),
    ("contraction_mixed", "It'S I'm We'Ve"),
    ("contraction_alone", "'s 't 're 've 'm 'll 'd"),
    ("contraction_cut", "we'l it' x're"),
    ("contraction_long_s", "it'\u017f '\u017f x'\u212a"),
    ("letters_plain", "hello world"),
    ("letters_prefix_punct", "(hello) .world ,x \"y\""),
    ("letters_prefix_space_kinds", "\ta \u00a0b \u3000c"),
    ("letters_no_newline_prefix", "\na\r\nb"),
    ("letters_digit_prefix", "1a 2bc"),
    ("digits_1_3", "1 12 123 1234 12345 1234567"),
    ("digits_unicode", "٣٤٥٦ ²³½ Ⅻⅷ"),
    ("digits_space", "a 123 b"),
    ("punct_run", "!!! ?? ... ---"),
    ("punct_newlines", "!\n\n?\r\n.\n x"),
    ("punct_space", " !a  ?b"),
    ("newlines_with_spaces", "a \n \n b"),
    ("newlines_only", "\n\n\r\n\r"),
    ("spaces_before_word", "a   b"),
    ("spaces_at_end", "end   "),
    ("single_space_before_digit", "a 1"),
    ("tabs", "\t\tx\t"),
    ("emoji", "🙂👍🏽 ok 🇫🇷!"),
    ("cjk", "日本語，中文。"),
    ("combining", "e\u0301t\u00e9 n\u0303"),
    ("control_chars", "a\x1cb\x1fc\x0bd\x0ce\x85f"),
    ("mixed_script", MIXED_TEXT),
]

# Characters of every class the pattern tells apart, for seeded random strings.
ALPHABET = (list("aZé日本ßΣж") + list("0129٣²Ⅻ") + [" ", " ", "\t", "\n", "\r", "\u00a0", "\u3000", "\x0b"] +
            list("'sStTrReEvVmMlLdD") + list("!?.,-()\"") + ["🙂", "👍🏽", "\u0301", "\x1c"])


def random_texts(rng, count, max_len):
    return [("random_%03d" % i, "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, max_len))))
            for i in range(count)]


def dump(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, ensure_ascii=False, indent=None, separators=(", ", ": ")) + "\n")


def meta(extra):
    out = {"generator": "tools/data/make_llama3_tokenizer_fixture.py", "tokenizers_version": tokenizers.__version__,
           "transformers_version": transformers.__version__}
    out.update(extra)
    return out


def train_byte_level(pre_tokenizer, vocab_size, normalizer=None, text=TRAINING_TEXT):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(text.splitlines(keepends=True), trainer)
    return tok


def write_folder(out, name, data, **special_tokens):
    """Writes tokenizer.json (`data`) and transformers' tokenizer_config.json into out/name;
    returns the file's Tokenizer and transformers' fast tokenizer of it."""
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "tokenizer.json")

    def write_json():
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=2)
            f.write("\n")

    write_json()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=path, clean_up_tokenization_spaces=False,
                                                **special_tokens)
    fast.save_pretrained(folder)  # tokenizer_config.json (+ special_tokens_map.json with older versions)
    for extra in ("special_tokens_map.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(folder, extra)):
            os.remove(os.path.join(folder, extra))
    write_json()  # save_pretrained rewrites it; keep ours
    return Tokenizer.from_file(path), fast


def dump_split_vectors(out, name, pattern, seed):
    """`pattern` alone (Split, isolated) on SPLIT_CASES and seeded random texts: text -> pieces."""
    split = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
    cases = [{"name": n, "text": t, "pieces": [p for p, _ in split.pre_tokenize_str(t)]}
             for n, t in SPLIT_CASES + random_texts(random.Random(seed), 80, 30)]
    dump(os.path.join(out, name), {"meta": meta({"pattern": pattern}), "cases": cases})


def make_llama3(out):
    tok = train_byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]), 600)
    tok.add_special_tokens(LLAMA3_SPECIALS)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    data = json.loads(tok.to_str())
    data["model"]["ignore_merges"] = True  # as Llama-3's tokenizer.json
    tok, fast = write_folder(out, "llama3_tiny", data, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    cases = []
    for name, text in CASES + random_texts(random.Random(20240801), 60, 40):
        with_bos = tok.encode(text).ids
        plain = tok.encode(text, add_special_tokens=False).ids
        hf_ids = fast(text)["input_ids"]
        assert hf_ids == with_bos, (name, hf_ids, with_bos)
        cases.append({"name": name, "text": text, "ids": with_bos, "ids_no_special": plain,
                      "decoded": tok.decode(plain, skip_special_tokens=False)})
    dump(os.path.join(out, "llama3_tiny_vectors.json"),
         {"meta": meta({"tokenizer": "llama3_tiny/tokenizer.json", "bos_id": bos,
                        "eos_id": tok.token_to_id("<|end_of_text|>"), "vocab_size": tok.get_vocab_size(),
                        "pattern": LLAMA3_PATTERN}),
          "cases": cases})

    dump_split_vectors(out, "llama3_split_vectors.json", LLAMA3_PATTERN, seed=7)


def make_gpt2(out):
    tok = train_byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), 500)
    tok.add_special_tokens(["<|endoftext|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    data = json.loads(tok.to_str())
    data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    folder = os.path.join(out, "gpt2_tiny")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=2)
        f.write("\n")
    tok = Tokenizer.from_file(path)
    cases = []
    for name, text in CASES + random_texts(random.Random(20240520), 40, 40):
        ids = tok.encode(text).ids
        cases.append({"name": name, "text": text, "ids": ids, "ids_no_special": tok.encode(text, add_special_tokens=False).ids,
                      "decoded": tok.decode(ids, skip_special_tokens=False)})
    dump(os.path.join(out, "gpt2_tiny_vectors.json"),
         {"meta": meta({"tokenizer": "gpt2_tiny/tokenizer.json", "eos_id": tok.token_to_id("<|endoftext|>"),
                        "vocab_size": tok.get_vocab_size()}),
          "cases": cases})


SPM_TEXTS = [
    ("hello", "Hello world"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("leading_space", " leading space and  two  spaces"),
    ("digits", "1 12 123 3.14159 2024-05-20"),
    ("unknown_bytes", "日本語 🙂 Ελληνικά"),
    ("newlines", "line one\nline two\n\nend"),
    ("special_text", "<s> and </s> stay text"),
    ("mixed_script", MIXED_TEXT),
]


def make_spm(out):
    folder = os.path.join(out, "spm_tiny")
    os.makedirs(folder, exist_ok=True)
    model = io.BytesIO()
    # Llama-2's settings (its tokenizer.model's trainer_spec), scaled down.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_TEXT.splitlines()), model_writer=model, model_type="bpe", vocab_size=700,
        byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity", unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=0.98,
        add_dummy_prefix=True, num_threads=1, minloglevel=2)
    path = os.path.join(folder, "tokenizer.model")
    with open(path, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_file=path)
    cases = []
    for name, text in SPM_TEXTS:
        ids = sp.encode(text)
        with_bos = sp.encode(text, add_bos=True)  # Llama-2's LlamaTokenizer: add_bos_token=True
        cases.append({"name": name, "text": text, "ids": with_bos, "ids_no_special": ids, "decoded": sp.decode(ids)})
    dump(os.path.join(out, "spm_tiny_vectors.json"),
         {"meta": meta({"tokenizer": "spm_tiny/tokenizer.model", "sentencepiece_version": spm.__version__,
                        "bos_id": sp.bos_id(), "eos_id": sp.eos_id(), "vocab_size": sp.get_piece_size()}),
          "cases": cases})


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# NFC's corners: decomposed letters, Hangul jamo, singletons (U+212B Angstrom
# -> U+00C5), reordered marks, compatibility characters NFC leaves alone.
QWEN2_CASES = [
    ("nfd_latin", "cafe\u0301 nai\u0308ve re\u0301sume\u0301 E\u0301TE\u0301"),
    ("nfc_latin", "caf\u00e9 na\u00efve r\u00e9sum\u00e9"),
    ("hangul_jamo", "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af \ud55c\uad6d\uc5b4"),
    ("singletons", "\u212b \u2126 \u212a \u0344 \u0958"),
    ("mark_order", "a\u0323\u0302 a\u0302\u0323 q\u0307\u0323 \u1e0b\u0323"),
    ("compat_untouched", "\ufb01 \u2460 \uff21 \u00b2 \u2126"),
    ("lone_marks", "\u0301\u0301x \u0308"),
    ("digits_one_each", "2024-05-20 1234567 3.14159 \u0663\u0664\u0665 \u00b2\u00b3"),
    ("chat", "<|im_start|>user\nHi, ce\u0301st 42?<|im_end|>\n<|im_start|>assistant\n<|endoftext|>"),
    ("special_partial", "<|im_start <|endoftext| |im_end|>"),
]


def make_qwen2(out):
    import unicodedata
    tok = train_byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]), 640,
        normalizer=normalizers.NFC(), text=TRAINING_TEXT + QWEN2_TRAINING_TEXT)
    tok.add_special_tokens(QWEN2_SPECIALS)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    data = json.loads(tok.to_str())
    data["model"]["ignore_merges"] = False  # as Qwen2.5's tokenizer.json
    tok, fast = write_folder(out, "qwen2_tiny", data, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    cases = []
    for name, text in CASES + QWEN2_CASES + random_texts(random.Random(20250919), 60, 40):
        ids = tok.encode(text).ids
        plain = tok.encode(text, add_special_tokens=False).ids
        hf_ids = fast(text)["input_ids"]
        assert hf_ids == ids == plain, (name, hf_ids, ids, plain)  # no BOS, no EOS
        cases.append({"name": name, "text": text, "ids": ids, "ids_no_special": plain,
                      "decoded": tok.decode(plain, skip_special_tokens=False),
                      "nfc": unicodedata.normalize("NFC", text)})
    dump(os.path.join(out, "qwen2_tiny_vectors.json"),
         {"meta": meta({"tokenizer": "qwen2_tiny/tokenizer.json", "eos_id": tok.token_to_id("<|endoftext|>"),
                        "vocab_size": tok.get_vocab_size(), "pattern": QWEN2_PATTERN,
                        "unicode_version": unicodedata.unidata_version}),
          "cases": cases})

    dump_split_vectors(out, "qwen2_split_vectors.json", QWEN2_PATTERN, seed=11)


QWEN2_TRAINING_TEXT = """
Qwen2 \u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002 caf\u00e9 na\u00efve \ud55c\uad6d\uc5b4 2024 12345
<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>
""" * 3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", choices=["llama3", "gpt2", "spm", "qwen2"])
    args = parser.parse_args()
    makers = {"llama3": make_llama3, "gpt2": make_gpt2, "spm": make_spm, "qwen2": make_qwen2}
    for name, make in makers.items():
        if args.only in (None, name):
            make(args.out)


if __name__ == "__main__":
    main()
