#!/usr/bin/env python3
"""Writes kernels/model/testdata/train_grads.golden: log-probabilities and
gradients of tiny random Llama, Qwen2 and Qwen3 decoders, computed by Hugging
Face transformers in PyTorch, for the Trainer's golden test
(kernels/model/train_test.go).

Run:  pip install -r kernels/model/testdata/gen/requirements.txt
      python3 kernels/model/testdata/gen/gen_grads.py

For each architecture the script draws random weights (numpy, fixed seed) in
the shapes of a tiny model whose vocabulary is the 263 tokens of the test
tokenizer (kernels/model/modeltest), builds LlamaForCausalLM,
Qwen2ForCausalLM or Qwen3ForCausalLM in float32 with eager attention, runs a
few token sequences of different lengths (one of a single token, which
predicts nothing), each alone from position 0, and backpropagates

    loss = sum_i sum_j c[i][j] * log p(ids[i][j+1] | ids[i][:j+1])

with random coefficients c. The Llama and Qwen2 models tie the output
projection to the embedding (its gradient sums both uses); Qwen3's is a
separate lm_head and its head width (8) is not hidden/heads (4).

File format (little endian), as kernels/kernelstest reads it:

    file   = magic "FNGT" | version u32 (= 1) | count u32 | count x tensor
    tensor = name_len u32 | name | ndim u32 | ndim x dim u32 | float32 data

Per architecture <a>:
    <a>/config         [7]  hidden, heads, kv heads, head dim, ffn, layers, untied (0/1)
    <a>/w/<hf name>         every weight, in HF layout
    <a>/grad/<hf name>      dloss/dweight
    <a>/ids/<i>             sequence i's token ids (integers as float32)
    <a>/dlogp/<i>           c[i], len(ids[i]) - 1 values
    <a>/logp/<i>            log p of each next token, len(ids[i]) - 1 values

With a GGUF path (python3 gen_grads.py SmolLM2-135M-Instruct.Q4_1.gguf, or
FROGNANO_TEST_GGUF set and --smollm2), it also writes
testdata/smollm2_grads.golden for SmolLM2-135M-Instruct, whose weights it
builds as gen_smollm2.py does (dequantised with the gguf package, llama.cpp's
q/k permutation undone): two sequences of the golden prompts' tokens, the
same kind of loss, and per weight a sample of gradient elements:
    smollm2/ids/<i>, smollm2/dlogp/<i>, smollm2/logp/<i>
    smollm2/idx/<hf name>   32 flat indices (as float32; exact below 2^24)
    smollm2/grad/<hf name>  the gradient at those indices
    smollm2/norm/<hf name>  [1] the gradient's L2 norm
"""

import hashlib
import json
import os
import struct
import sys

import numpy as np
import torch
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

MAGIC = b"FNGT"
VERSION = 1
VOCAB = 263  # modeltest.Tokens(): 256 bytes, 4 merges, 3 specials
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "train_grads.golden"))
LENGTHS = [11, 5, 1, 17]

SPECS = {
    # name: (config class, model class, hidden, heads, kv heads, head dim, ffn, layers, untied, seed)
    "llama": (LlamaConfig, LlamaForCausalLM, 16, 4, 2, 4, 32, 2, False, 1),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, 16, 4, 2, 4, 32, 2, False, 2),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, 16, 4, 2, 8, 32, 2, True, 3),
}


def random_weights(arch, dim, heads, kv, hd, ffn, layers, untied, rng):
    """Weights by HF name, scaled as modeltest.RandomWeights scales them."""
    w = {}

    def add(name, scale, base, *shape):
        w[name] = (base + scale * rng.standard_normal(shape)).astype(np.float32)

    q, kvd = heads * hd, kv * hd
    add("model.embed_tokens.weight", 1, 0, VOCAB, dim)
    add("model.norm.weight", 0.1, 1, dim)
    if untied:
        add("lm_head.weight", 0.3, 0, VOCAB, dim)
    inv = 1 / np.sqrt(dim)
    for l in range(layers):
        p = f"model.layers.{l}."
        add(p + "input_layernorm.weight", 0.1, 1, dim)
        add(p + "post_attention_layernorm.weight", 0.1, 1, dim)
        add(p + "self_attn.q_proj.weight", 2 * inv, 0, q, dim)
        add(p + "self_attn.k_proj.weight", 2 * inv, 0, kvd, dim)
        add(p + "self_attn.v_proj.weight", inv, 0, kvd, dim)
        add(p + "self_attn.o_proj.weight", 1 / np.sqrt(q), 0, dim, q)
        if arch == "qwen2":
            add(p + "self_attn.q_proj.bias", 0.5, 0, q)
            add(p + "self_attn.k_proj.bias", 0.5, 0, kvd)
            add(p + "self_attn.v_proj.bias", 0.5, 0, kvd)
        if arch == "qwen3":
            add(p + "self_attn.q_norm.weight", 0.2, 1, hd)
            add(p + "self_attn.k_norm.weight", 0.2, 1, hd)
        add(p + "mlp.gate_proj.weight", inv, 0, ffn, dim)
        add(p + "mlp.up_proj.weight", inv, 0, ffn, dim)
        add(p + "mlp.down_proj.weight", 1 / np.sqrt(ffn), 0, dim, ffn)
    return w


def case(arch):
    cfg_cls, model_cls, dim, heads, kv, hd, ffn, layers, untied, seed = SPECS[arch]
    rng = np.random.default_rng(seed)
    w = random_weights(arch, dim, heads, kv, hd, ffn, layers, untied, rng)
    kwargs = dict(
        vocab_size=VOCAB, hidden_size=dim, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd, max_position_embeddings=512,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=not untied, hidden_act="silu",
    )
    if arch == "llama":
        kwargs.update(attention_bias=False, mlp_bias=False)
    if arch == "qwen3":
        kwargs.update(attention_bias=False)
    cfg = cfg_cls(**kwargs)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(cfg).to(torch.float32)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in w.items()}, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and not untied)]
    assert not missing and not unexpected, (missing, unexpected)
    if not untied:
        model.tie_weights()
        assert model.lm_head.weight is model.model.embed_tokens.weight
    assert {n for n, _ in model.named_parameters()} == set(w), sorted(w)
    model.train()  # no dropout in these models; gradients on

    seqs = [rng.integers(0, VOCAB, size=n) for n in LENGTHS]
    coefs = [rng.standard_normal(n - 1).astype(np.float32) for n in LENGTHS]
    model.zero_grad()
    loss = torch.zeros((), dtype=torch.float32)
    logps = []
    for ids, c in zip(seqs, coefs):
        logits = model(torch.tensor(ids[None], dtype=torch.long)).logits[0]
        logp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:, None], dtype=torch.long))[:, 0]
        loss = loss + (torch.from_numpy(c) * logp).sum()
        logps.append(logp.detach().numpy())
    loss.backward()
    grads = {n: p.grad.detach().numpy() for n, p in model.named_parameters()}

    out = [(arch + "/config", np.array([dim, heads, kv, hd, ffn, layers, int(untied)], dtype=np.float32))]
    for name in sorted(w):
        out.append((f"{arch}/w/{name}", w[name]))
        out.append((f"{arch}/grad/{name}", grads[name]))
    for i, (ids, c, lp) in enumerate(zip(seqs, coefs, logps)):
        out += [(f"{arch}/ids/{i}", ids.astype(np.float32)), (f"{arch}/dlogp/{i}", c), (f"{arch}/logp/{i}", lp)]
    print(arch, "loss", loss.item(), "largest gradient", max(float(np.abs(g).max()) for g in grads.values()))
    return out


SMOL_OUT = os.path.normpath(os.path.join(HERE, "..", "smollm2_grads.golden"))
SMOL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TOKDATA = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tokenizer", "testdata"))
SAMPLES = 32


def smollm2(path):
    """SmolLM2's gradients, sampled, for the loss of two golden prompts."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if digest != SMOL_SHA256:
        sys.exit(f"{path}: sha256 {digest}, want {SMOL_SHA256}")
    r = GGUFReader(path)
    meta = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("tokenizer.")}
    wt = {}
    for t in r.tensors:
        wt[t.name] = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(d) for d in reversed(t.shape.tolist())])
    n_head, n_kv = int(meta["llama.attention.head_count"]), int(meta["llama.attention.head_count_kv"])
    cfg = LlamaConfig(
        vocab_size=wt["token_embd.weight"].shape[0], hidden_size=int(meta["llama.embedding_length"]),
        intermediate_size=int(meta["llama.feed_forward_length"]), num_hidden_layers=int(meta["llama.block_count"]),
        num_attention_heads=n_head, num_key_value_heads=n_kv, max_position_embeddings=int(meta["llama.context_length"]),
        rms_norm_eps=float(meta["llama.attention.layer_norm_rms_epsilon"]), rope_theta=float(meta["llama.rope.freq_base"]),
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False, hidden_act="silu")
    cfg._attn_implementation = "eager"

    def unpermute(w, heads):  # llama.cpp: w.reshape(heads, 2, hd/2, in).swapaxes(1, 2); inverted
        out, inp = w.shape
        return w.reshape(heads, out // heads // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)

    sd = {"model.embed_tokens.weight": wt["token_embd.weight"], "model.norm.weight": wt["output_norm.weight"]}
    for i in range(cfg.num_hidden_layers):
        g, h = f"blk.{i}.", f"model.layers.{i}."
        sd[h + "input_layernorm.weight"] = wt[g + "attn_norm.weight"]
        sd[h + "self_attn.q_proj.weight"] = unpermute(wt[g + "attn_q.weight"], n_head)
        sd[h + "self_attn.k_proj.weight"] = unpermute(wt[g + "attn_k.weight"], n_kv)
        sd[h + "self_attn.v_proj.weight"] = wt[g + "attn_v.weight"]
        sd[h + "self_attn.o_proj.weight"] = wt[g + "attn_output.weight"]
        sd[h + "post_attention_layernorm.weight"] = wt[g + "ffn_norm.weight"]
        sd[h + "mlp.gate_proj.weight"] = wt[g + "ffn_gate.weight"]
        sd[h + "mlp.up_proj.weight"] = wt[g + "ffn_up.weight"]
        sd[h + "mlp.down_proj.weight"] = wt[g + "ffn_down.weight"]
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.float32)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)
    model.tie_weights()
    model.train()

    tokens = {c["text"]: c["ids"] for c in json.load(open(os.path.join(TOKDATA, "smollm2_tokens.json")))["cases"]}
    seqs = [np.array(next(v for k, v in tokens.items() if k.startswith("class Foo(Bar):"))),
            np.array(tokens["I'm fine, you're great, they've gone, she'll come, he'd know, it's here, don't"])]
    rng = np.random.default_rng(4)
    coefs = [rng.standard_normal(len(s) - 1).astype(np.float32) / len(s) for s in seqs]
    model.zero_grad()
    loss = torch.zeros((), dtype=torch.float32)
    out = []
    for i, (ids, c) in enumerate(zip(seqs, coefs)):
        logits = model(torch.tensor(ids[None], dtype=torch.long)).logits[0]
        logp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:, None], dtype=torch.long))[:, 0]
        loss = loss + (torch.from_numpy(c) * logp).sum()
        out += [(f"smollm2/ids/{i}", ids.astype(np.float32)), (f"smollm2/dlogp/{i}", c),
                (f"smollm2/logp/{i}", logp.detach().numpy())]
    loss.backward()
    for name, p in model.named_parameters():
        g = p.grad.detach().numpy().reshape(-1)
        # The largest element, then random ones.
        idx = np.concatenate([[int(np.abs(g).argmax())], rng.integers(0, g.size, SAMPLES - 1)])
        out += [(f"smollm2/idx/{name}", idx.astype(np.float32)), (f"smollm2/grad/{name}", g[idx]),
                (f"smollm2/norm/{name}", np.array([np.linalg.norm(g.astype(np.float64))], dtype=np.float32))]
    print("smollm2 loss", loss.item(), "sequences", [len(s) for s in seqs])
    return out


def write(path, tensors):
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<II", VERSION, len(tensors)))
        for name, t in tensors:
            t = np.asarray(t, dtype="<f4")
            b = name.encode()
            f.write(struct.pack("<I", len(b)) + b)
            f.write(struct.pack("<I", t.ndim) + struct.pack("<%dI" % t.ndim, *t.shape))
            f.write(t.tobytes())
    print("wrote", path, os.path.getsize(path), "bytes")


def main():
    tensors = []
    for arch in SPECS:
        tensors += case(arch)
    write(OUT, tensors)
    args = sys.argv[1:]
    path = args[0] if args and args[0] != "--smollm2" else (os.environ.get("FROGNANO_TEST_GGUF", "") if args else "")
    if path:
        write(SMOL_OUT, smollm2(path))


if __name__ == "__main__":
    main()
