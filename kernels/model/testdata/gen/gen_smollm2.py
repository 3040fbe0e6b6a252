#!/usr/bin/env python3
"""Writes kernels/model/testdata/smollm2_logits.golden, the whole-model golden
file for SmolLM2-135M-Instruct.Q4_1.gguf.

Run:  pip install -r kernels/model/testdata/gen/requirements.txt
      python3 kernels/model/testdata/gen/gen_smollm2.py /path/to/SmolLM2-135M-Instruct.Q4_1.gguf

The reference is Hugging Face transformers' LlamaForCausalLM in PyTorch,
float32, on the CPU, eager attention. Its weights are the GGUF's, dequantised
with the gguf package (the same values frognano computes with), and its
configuration is read from the GGUF metadata. llama.cpp's converter permuted
the q and k projections for its interleaved rotary form; this script undoes
that permutation here, independently of the Go loader, so that the golden
logits are what HF's own Llama computes.

The prompts' token ids come from the tokenizer fixtures
(kernels/tokenizer/testdata), which were checked against HF tokenizers, and
are stored in the golden file with the logits.

File format (little endian), as kernels/kernelstest reads it:

    file   = magic "FNGT" | version u32 (= 1) | count u32 | count x tensor
    tensor = name_len u32 | name | ndim u32 | ndim x dim u32 | float32 data

Per case <c>: <c>/ids [T] (integers as float32), <c>/last_logits [vocab],
<c>/top_ids [T, 20] and <c>/top_logits [T, 20] (the 20 largest logits at
every position, largest first); chat/greedy [24] is HF's greedy continuation
of the chat case.
"""

import hashlib
import json
import os
import struct
import sys

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from transformers import LlamaConfig, LlamaForCausalLM

MAGIC = b"FNGT"
VERSION = 1
TOPK = 20
GREEDY = 24
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "smollm2_logits.golden"))
TOKDATA = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tokenizer", "testdata"))
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def prompts():
    """Token ids of the golden cases, from the tokenizer fixtures."""
    tokens = {c["text"]: c["ids"] for c in json.load(open(os.path.join(TOKDATA, "smollm2_tokens.json")))["cases"]}
    chat = json.load(open(os.path.join(TOKDATA, "chat.json")))["cases"]
    cases = [
        ("prose", tokens["I'm fine, you're great, they've gone, she'll come, he'd know, it's here, don't"]),
        ("code", next(v for k, v in tokens.items() if k.startswith("class Foo(Bar):"))),
        ("single", tokens["1234567890"][:1]),
    ]
    # The longest SmolLM2 chat rendering with a generation prompt, under 200 tokens.
    best = None
    for c in chat:
        if c["template"] == "smollm2" and c["add_generation_prompt"] and len(c["ids"]) <= 200:
            if best is None or len(c["ids"]) > len(best["ids"]):
                best = c
    cases.append(("chat", best["ids"]))
    return cases


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FROGNANO_TEST_GGUF", "")
    if not path:
        sys.exit("usage: gen_smollm2.py SmolLM2-135M-Instruct.Q4_1.gguf (or set FROGNANO_TEST_GGUF)")
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if digest != SHA256:
        sys.exit(f"{path}: sha256 {digest}, want {SHA256}")

    r = GGUFReader(path)
    meta = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("tokenizer.")}
    arch = meta["general.architecture"]
    assert arch == "llama", arch
    weights = {}
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        weights[t.name] = w.reshape([int(d) for d in reversed(t.shape.tolist())])
    n_head = int(meta["llama.attention.head_count"])
    n_kv = int(meta["llama.attention.head_count_kv"])
    dim = int(meta["llama.embedding_length"])
    vocab = weights["token_embd.weight"].shape[0]
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=dim,
        intermediate_size=int(meta["llama.feed_forward_length"]),
        num_hidden_layers=int(meta["llama.block_count"]),
        num_attention_heads=n_head,
        num_key_value_heads=n_kv,
        max_position_embeddings=int(meta["llama.context_length"]),
        rms_norm_eps=float(meta["llama.attention.layer_norm_rms_epsilon"]),
        rope_theta=float(meta.get("llama.rope.freq_base", 10000.0)),
        tie_word_embeddings="output.weight" not in weights,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        bos_token_id=1,
        eos_token_id=2,
    )
    cfg._attn_implementation = "eager"
    print(cfg)

    def unpermute(w, heads):
        # llama.cpp: w.reshape(heads, 2, hd/2, in).swapaxes(1, 2); inverted.
        out, inp = w.shape
        return w.reshape(heads, out // heads // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)

    sd = {"model.embed_tokens.weight": weights["token_embd.weight"], "model.norm.weight": weights["output_norm.weight"]}
    if "output.weight" in weights:
        sd["lm_head.weight"] = weights["output.weight"]
    for i in range(cfg.num_hidden_layers):
        g, h = f"blk.{i}.", f"model.layers.{i}."
        sd[h + "input_layernorm.weight"] = weights[g + "attn_norm.weight"]
        sd[h + "self_attn.q_proj.weight"] = unpermute(weights[g + "attn_q.weight"], n_head)
        sd[h + "self_attn.k_proj.weight"] = unpermute(weights[g + "attn_k.weight"], n_kv)
        sd[h + "self_attn.v_proj.weight"] = weights[g + "attn_v.weight"]
        sd[h + "self_attn.o_proj.weight"] = weights[g + "attn_output.weight"]
        sd[h + "post_attention_layernorm.weight"] = weights[g + "ffn_norm.weight"]
        sd[h + "mlp.gate_proj.weight"] = weights[g + "ffn_gate.weight"]
        sd[h + "mlp.up_proj.weight"] = weights[g + "ffn_up.weight"]
        sd[h + "mlp.down_proj.weight"] = weights[g + "ffn_down.weight"]

    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.float32)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied
    assert not missing and not unexpected, (missing, unexpected)
    if cfg.tie_word_embeddings:
        model.tie_weights()
        assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    model.eval()

    tensors = []
    for name, ids in prompts():
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
        top = np.argsort(-logits, axis=1, kind="stable")[:, :TOPK]
        tensors += [
            (name + "/ids", np.array(ids, dtype=np.float32)),
            (name + "/last_logits", logits[-1]),
            (name + "/top_ids", top.astype(np.float32)),
            (name + "/top_logits", np.take_along_axis(logits, top, axis=1)),
        ]
        print(name, len(ids), "tokens; argmax at the end:", int(top[-1, 0]))
        if name == "chat":
            # Greedy continuation, so that generation with the KV cache can
            # be checked end to end.
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                     do_sample=False, max_new_tokens=GREEDY, eos_token_id=None, pad_token_id=0)
            greedy = out[0, len(ids):].numpy()
            tensors.append((name + "/greedy", greedy.astype(np.float32)))
            print("greedy:", greedy.tolist())

    with open(OUT, "wb") as f:
        f.write(MAGIC + struct.pack("<II", VERSION, len(tensors)))
        for name, t in tensors:
            t = np.asarray(t, dtype="<f4")
            b = name.encode()
            f.write(struct.pack("<I", len(b)) + b)
            f.write(struct.pack("<I", t.ndim) + struct.pack("<%dI" % t.ndim, *t.shape))
            f.write(t.tobytes())
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
