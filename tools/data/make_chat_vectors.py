#!/usr/bin/env python3
"""Writes io/prepare/testdata/chat_vectors.json: conversations rendered by transformers.

    python3 -m venv /tmp/hf && /tmp/hf/bin/pip install tokenizers transformers jinja2
    /tmp/hf/bin/python tools/data/make_chat_vectors.py \\
        --tokenizers io/tokenizer/testdata --out io/prepare/testdata/chat_vectors.json

For the tiny Llama 3 and Qwen2 tokenizers of io/tokenizer/testdata, each conversation's
ids from transformers' apply_chat_template(messages, tokenize=True) with each template:
Meta-Llama-3-8B-Instruct's (bos_token, then per message a header and the trimmed content
ending in <|eot_id|>), Llama 3.1's / 3.2's (a dated system message first), plain ChatML,
Qwen2-Instruct's and Qwen2.5-Instruct's (ChatML with their default system messages); and, for six conversations cut before their last reply,
the ids with add_generation_prompt=True (what generation continues). io/prepare:chat_test
renders the same conversations and compares ids. Content never holds special-token text here: transformers would read
it as the special token, colossal keeps it text (chat_test checks that separately).
"""
import argparse
import json
import random

import tokenizers
import transformers

# The templates, written as the published tokenizer_config.json files have them.
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# Llama 3.1's and 3.2's, without their tool branches (inert without tools); the date is
# passed as date_string, the templates' own default.
LLAMA31 = r"""{{- bos_token }}
{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""
# Qwen2-Instruct's.
QWEN2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Qwen2.5-Instruct's, without its tool branches.
QWEN25 = r"""{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""
CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def conversations():
    rng = random.Random(20261201)
    words = ["the", "model", "Zürich", "naïve", "東京", "42", "3.14159", "don't", "  spaced  ",
             "tab\there", "line\nbreak", "emoji 🙂", "x" * 30, "ÅÄÖ", "\u0301accent", "?!", "-->"]
    out = [
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}],
        [{"role": "system", "content": "You are terse."},
         {"role": "user", "content": "What is 2+2?"},
         {"role": "assistant", "content": "4"},
         {"role": "user", "content": "And 3+3?"},
         {"role": "assistant", "content": "6."}],
        [{"role": "user", "content": "  padded question \n"}, {"role": "assistant", "content": "\n\n padded answer  "}],
        [{"role": "user", "content": "empty answer"}, {"role": "assistant", "content": ""}],
        [{"role": "user", "content": "1234567 numbers 89"}, {"role": "assistant", "content": "12 345 6789"}],
        [{"role": "user", "content": "Cafe\u0301 (NFD)"}, {"role": "assistant", "content": "Caf\u00e9 (NFC)"}],
    ]
    for _ in range(20):
        conv = []
        if rng.random() < 0.5:
            conv.append({"role": "system", "content": " ".join(rng.choices(words, k=rng.randint(1, 6)))})
        for _ in range(rng.randint(1, 3)):
            conv.append({"role": "user", "content": " ".join(rng.choices(words, k=rng.randint(1, 8)))})
            conv.append({"role": "assistant", "content": " ".join(rng.choices(words, k=rng.randint(1, 8)))})
        out.append(conv)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cases = []
    families = [("llama3", "llama3_tiny", LLAMA3), ("llama3.1", "llama3_tiny", LLAMA31),
                ("chatml", "qwen2_tiny", CHATML), ("qwen2", "qwen2_tiny", QWEN2), ("qwen2.5", "qwen2_tiny", QWEN25)]
    for family, folder, template in families:
        tok = transformers.AutoTokenizer.from_pretrained(f"{args.tokenizers}/{folder}")
        for messages in conversations():
            ids = tok.apply_chat_template(messages, chat_template=template, tokenize=True, return_dict=False,
                                          date_string="26 Jul 2024")
            cases.append({"template": family, "tokenizer": folder, "messages": messages, "ids": list(ids)})
        # Prompts for generation: the conversation up to a user turn, then the assistant's header.
        for messages in conversations()[:6]:
            prompt = messages[:-1]
            ids = tok.apply_chat_template(prompt, chat_template=template, tokenize=True, return_dict=False,
                                          add_generation_prompt=True, date_string="26 Jul 2024")
            cases.append({"template": family, "tokenizer": folder, "messages": prompt, "ids": list(ids),
                          "add_generation_prompt": True})
    meta = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
