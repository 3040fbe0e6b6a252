#!/usr/bin/env python3
"""Writes kernels/model/testdata/qwen25_coder_{05b,15b}_logits.golden, the
whole-model golden files for the Qwen2.5-Coder GGUFs that `frognano model
pull qwen2.5-coder-0.5b` and `qwen2.5-coder-1.5b` store.

Run:  pip install -r kernels/model/testdata/gen/requirements.txt
      python3 kernels/model/testdata/gen/gen_qwen.py /path/to/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf

The reference is Hugging Face transformers' Qwen2ForCausalLM in PyTorch,
float32, on the CPU, eager attention. Its weights are the GGUF's,
dequantised with the gguf package (the same values frognano computes with),
and its configuration is read from the GGUF metadata. llama.cpp does not
permute Qwen2's q and k projections, so the tensors map one to one.

The prompts' token ids come from the tokenizer fixtures
(kernels/tokenizer/testdata/qwen25_*.json, checked against HF tokenizers).

A vocabulary of 151,936 makes whole logit rows large, so the file keeps, per
case <c>: <c>/ids [T] (integers as float32), <c>/top_ids [T, 20] and
<c>/top_logits [T, 20] (the 20 largest logits at every position, largest
first), and <c>/last_logits [vocab/STRIDE]: the last position's logits of
every STRIDE-th token id. chat/greedy [24] is HF's greedy continuation of
the chat case. Format as kernels/kernelstest reads it (little endian):

    file   = magic "FNGT" | version u32 (= 1) | count u32 | count x tensor
    tensor = name_len u32 | name | ndim u32 | ndim x dim u32 | float32 data
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
from transformers import Qwen2Config, Qwen2ForCausalLM

MAGIC = b"FNGT"
VERSION = 1
TOPK = 20
GREEDY = 24
STRIDE = 64
HERE = os.path.dirname(os.path.abspath(__file__))
TOKDATA = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tokenizer", "testdata"))
MODELS = {
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32": ("qwen2.5-coder-0.5b", "qwen25_coder_05b_logits.golden"),
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046": ("qwen2.5-coder-1.5b", "qwen25_coder_15b_logits.golden"),
}


def prompts(model):
    """Token ids of the golden cases, from the tokenizer fixtures."""
    tokens = {c["text"]: c["ids"] for c in json.load(open(os.path.join(TOKDATA, "qwen25_tokens.json")))["cases"]}
    chat = json.load(open(os.path.join(TOKDATA, "qwen25_chat.json")))["cases"]
    cases = [
        ("prose", tokens["I'm fine, you're great, they've gone, she'll come, he'd know, it's here, don't"]),
        ("code", next(v for k, v in tokens.items() if k.startswith("class Foo(Bar):"))),
        ("unicode", tokens["中文分词测试：你好，世界！"]),
        ("single", tokens["1234567890"][:1]),
    ]
    # The longest rendering with tools and a generation prompt under 400 tokens.
    best = None
    for c in chat:
        if c["model"] == model and c["add_generation_prompt"] and c["tools"] and len(c["ids"]) <= 400:
            if best is None or len(c["ids"]) > len(best["ids"]):
                best = c
    cases.append(("chat", best["ids"]))
    return cases


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_qwen.py Qwen2.5-Coder-{0.5B,1.5B}-Instruct.Q4_K_M.gguf")
    path = sys.argv[1]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() not in MODELS:
        sys.exit(f"{path}: sha256 {h.hexdigest()} is neither pinned Qwen2.5-Coder file")
    model_name, out_name = MODELS[h.hexdigest()]
    out = os.path.normpath(os.path.join(HERE, "..", out_name))

    r = GGUFReader(path)
    meta = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("tokenizer.")}
    assert meta["general.architecture"] == "qwen2", meta["general.architecture"]
    p = "qwen2."
    n_layers = int(meta[p + "block_count"])
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    for i in range(n_layers):
        g, hf = f"blk.{i}.", f"model.layers.{i}."
        names.update({
            g + "attn_norm.weight": hf + "input_layernorm.weight",
            g + "attn_q.weight": hf + "self_attn.q_proj.weight",
            g + "attn_q.bias": hf + "self_attn.q_proj.bias",
            g + "attn_k.weight": hf + "self_attn.k_proj.weight",
            g + "attn_k.bias": hf + "self_attn.k_proj.bias",
            g + "attn_v.weight": hf + "self_attn.v_proj.weight",
            g + "attn_v.bias": hf + "self_attn.v_proj.bias",
            g + "attn_output.weight": hf + "self_attn.o_proj.weight",
            g + "ffn_norm.weight": hf + "post_attention_layernorm.weight",
            g + "ffn_gate.weight": hf + "mlp.gate_proj.weight",
            g + "ffn_up.weight": hf + "mlp.up_proj.weight",
            g + "ffn_down.weight": hf + "mlp.down_proj.weight",
        })
    sd = {}
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        sd[names[t.name]] = torch.from_numpy(np.ascontiguousarray(w.reshape([int(d) for d in reversed(t.shape.tolist())])))
    vocab = sd["model.embed_tokens.weight"].shape[0]
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=int(meta[p + "embedding_length"]),
        intermediate_size=int(meta[p + "feed_forward_length"]),
        num_hidden_layers=n_layers,
        num_attention_heads=int(meta[p + "attention.head_count"]),
        num_key_value_heads=int(meta[p + "attention.head_count_kv"]),
        max_position_embeddings=int(meta[p + "context_length"]),
        rms_norm_eps=float(meta[p + "attention.layer_norm_rms_epsilon"]),
        rope_theta=float(meta[p + "rope.freq_base"]),
        tie_word_embeddings="lm_head.weight" not in sd,
        use_sliding_window=False,
        hidden_act="silu",
        bos_token_id=151643,
        eos_token_id=151645,
    )
    cfg._attn_implementation = "eager"
    print(cfg)
    with torch.device("meta"):
        model = Qwen2ForCausalLM(cfg)
    model.load_state_dict(sd, strict=not cfg.tie_word_embeddings, assign=True)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    # Rotary inverse frequencies are a buffer, not a weight: recompute them
    # off the meta device.
    model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg)
    model = model.to(torch.float32).eval()
    rope = model.model.rotary_emb.inv_freq
    theta = cfg.rope_parameters["rope_theta"]
    assert theta == float(meta[p + "rope.freq_base"]), cfg.rope_parameters
    assert rope.device.type == "cpu" and abs(float(rope[1]) - theta ** (-2 / (cfg.hidden_size // cfg.num_attention_heads))) < 1e-6

    tensors = []
    for name, ids in prompts(model_name):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
        top = np.argsort(-logits, axis=1, kind="stable")[:, :TOPK]
        tensors += [
            (name + "/ids", np.array(ids, dtype=np.float32)),
            (name + "/last_logits", logits[-1, ::STRIDE]),
            (name + "/top_ids", top.astype(np.float32)),
            (name + "/top_logits", np.take_along_axis(logits, top, axis=1)),
        ]
        print(name, len(ids), "tokens; argmax at the end:", int(top[-1, 0]))
        if name == "chat":
            with torch.no_grad():
                out_ids = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                         do_sample=False, max_new_tokens=GREEDY, eos_token_id=None, pad_token_id=0)
            greedy = out_ids[0, len(ids):].numpy()
            tensors.append((name + "/greedy", greedy.astype(np.float32)))
            print("greedy:", greedy.tolist())

    with open(out, "wb") as f:
        f.write(MAGIC + struct.pack("<II", VERSION, len(tensors)))
        for name, t in tensors:
            t = np.asarray(t, dtype="<f4")
            b = name.encode()
            f.write(struct.pack("<I", len(b)) + b)
            f.write(struct.pack("<I", t.ndim) + struct.pack("<%dI" % t.ndim, *t.shape))
            f.write(t.tobytes())
    print("wrote", out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    main()
