#!/usr/bin/env python3
"""Generates the Qwen2.5 tokenizer and chat-template golden fixtures from the
Qwen2.5-Coder GGUF files that `frognano model pull qwen2.5-coder-0.5b` and
`qwen2.5-coder-1.5b` store, with HF `tokenizers` and `transformers` as the
reference implementation.

    python3 -m venv /tmp/tokgen && /tmp/tokgen/bin/pip install -r requirements.txt
    frognano model pull qwen2.5-coder-0.5b && frognano model pull qwen2.5-coder-1.5b
    cd kernels/tokenizer/testdata/gen
    /tmp/tokgen/bin/python gen_qwen.py QWEN05.gguf QWEN15.gguf

The tokenizer.json that Qwen2.5 ships is rebuilt from the GGUF's vocabulary
and merges (both files carry the same ones; the script checks): NFC
normaliser; Split on Qwen2's regex (isolated) then ByteLevel without its own
regex; BPE; the control tokens (GGUF type 3) as special added tokens and the
user-defined ones (type 4: <tool_call>, </tool_call>) as non-special added
tokens. The GGUF's [PAD…] filler tokens (type 5) are left out of the
vocabulary, as upstream has them only as unused embedding rows.

Outputs (in ../):
  qwen25_tokens.json  the strings of strings.py and their ids
                      (tokenizers.encode, no special-token post-processing)
  qwen25_chat.json    both GGUFs' chat templates, and the conversations of
                      chat.json rendered by transformers' apply_chat_template
                      with each, with their ids
"""
import hashlib
import json
import os
import sys

import gguf
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from strings import all_strings

GOLDEN_VERSION = 1
QWEN2_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
here = os.path.dirname(os.path.abspath(__file__))
if len(sys.argv) != 3:
    sys.exit("usage: gen_qwen.py QWEN2.5-CODER-0.5B.gguf QWEN2.5-CODER-1.5B.gguf")


def read(path):
    r = gguf.GGUFReader(path)
    f = lambda k: r.fields[k].contents()
    assert f("tokenizer.ggml.model") == "gpt2"
    assert f("tokenizer.ggml.pre") == "qwen2", f("tokenizer.ggml.pre")
    return {
        "tokens": f("tokenizer.ggml.tokens"),
        "types": f("tokenizer.ggml.token_type"),
        "merges": f("tokenizer.ggml.merges"),
        "template": f("tokenizer.chat_template"),
        "name": f("general.name"),
    }


models = {"qwen2.5-coder-0.5b": read(sys.argv[1]), "qwen2.5-coder-1.5b": read(sys.argv[2])}
a, b = models.values()
assert a["tokens"] == b["tokens"] and a["types"] == b["types"] and a["merges"] == b["merges"], "the two GGUFs' tokenizers differ"
tokens, types, merges = a["tokens"], a["types"], a["merges"]
vocab_digest = hashlib.sha256(json.dumps([tokens, types, merges]).encode()).hexdigest()

tok_json = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": ty == 3}
        for i, (t, ty) in enumerate(zip(tokens, types))
        if ty in (3, 4)
    ],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        ],
    },
    "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    "model": {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": "",
        "end_of_word_suffix": "",
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 1},
        "merges": merges,
    },
}
tok = Tokenizer.from_str(json.dumps(tok_json))

cases = []
for s in all_strings():
    enc = tok.encode(s, add_special_tokens=False)
    cases.append({"text": s, "ids": enc.ids})
with open(os.path.join(here, "..", "qwen25_tokens.json"), "w") as f:
    json.dump({"golden_version": GOLDEN_VERSION, "vocab_sha256": vocab_digest, "pattern": QWEN2_PATTERN, "cases": cases}, f, ensure_ascii=False, indent=0)

fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>")
conversations, seen = [], set()
for c in json.load(open(os.path.join(here, "..", "chat.json")))["cases"]:
    if c["name"] not in seen:
        seen.add(c["name"])
        conversations.append({"name": c["name"], "messages": c["messages"], "tools": c["tools"]})

chat_cases = []
for mname, m in models.items():
    for conv in conversations:
        for gen_prompt in (False, True):
            rendered = fast.apply_chat_template(conv["messages"], tools=conv["tools"], chat_template=m["template"],
                                                tokenize=False, add_generation_prompt=gen_prompt)
            chat_cases.append({
                "name": conv["name"], "model": mname, "add_generation_prompt": gen_prompt,
                "messages": conv["messages"], "tools": conv["tools"],
                "rendered": rendered, "ids": tok.encode(rendered, add_special_tokens=False).ids,
            })
with open(os.path.join(here, "..", "qwen25_chat.json"), "w") as f:
    json.dump({"golden_version": GOLDEN_VERSION, "templates": {k: m["template"] for k, m in models.items()}, "cases": chat_cases},
              f, ensure_ascii=False, indent=1)
print(len(cases), "token cases,", len(chat_cases), "chat cases; vocab sha256", vocab_digest)
