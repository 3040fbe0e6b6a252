#!/usr/bin/env python3
"""Writes grads.golden, the PyTorch gradients for the backward conformance
tests (kernels/kernelstest/grad.go).

Run from anywhere:  python3 kernels/testdata/gen/gen_grads.py
It needs PyTorch and NumPy, draws every input from a fixed seed and writes
the file in the format of gen_ops.py (see there). Every gradient is torch
autograd of the textbook forward operation, evaluated in float64 on the
float32 inputs, so the references carry no float32 rounding of their own.
AdamW is the exception: torch.optim.AdamW steps float32 tensors, as a
trainer does, so the Go update can be held to a few ulps of torch's.

Names are "<case>/<tensor>", cases prefixed by the operation
("attention_gqa3/dq"). Integer parameters are float32 tensors.
"""

import os
import struct

import numpy as np
import torch

MAGIC = b"FNGT"
VERSION = 1
OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
rng = np.random.default_rng(20250607)
torch.use_deterministic_algorithms(True)


def f32(x):
    return np.asarray(x, dtype=np.float32)


def randn(*shape, scale=1.0):
    return f32(rng.standard_normal(shape) * scale)


def t64(x, grad=False):
    return torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=grad)


def np64(t):
    return t.detach().numpy().astype(np.float64)


def linear():
    ts = []
    for m, n_in, n_out in [(1, 8, 4), (5, 3, 7), (17, 33, 9), (64, 48, 20), (130, 16, 40)]:
        x, w, dy, dw0 = randn(m, n_in), randn(n_out, n_in), randn(m, n_out), randn(n_out, n_in)
        xt, wt = t64(x, True), t64(w, True)
        torch.nn.functional.linear(xt, wt).backward(t64(dy))
        name = "linear_m%din%dout%d" % (m, n_in, n_out)
        ts += [(name + "/x", x), (name + "/w", w), (name + "/dy", dy), (name + "/dw0", dw0),
               (name + "/dx", np64(xt.grad)), (name + "/dw", dw0 + np64(wt.grad))]
    # The bias gradient of a Linear layer: column sums.
    x, d0 = randn(37, 21), randn(21)
    bt = t64(np.zeros(21), True)
    (t64(np.zeros((37, 21))) + bt).backward(t64(x))
    ts += [("sumrows/x", x), ("sumrows/d0", d0), ("sumrows/out", d0 + np64(bt.grad))]
    return ts


def embedding():
    table, d0 = randn(11, 6), randn(11, 6)
    ids = np.array([3, 0, 10, 3, 7, 3])
    dy = randn(len(ids), 6)
    tt = t64(table, True)
    torch.nn.functional.embedding(torch.tensor(ids), tt).backward(t64(dy))
    return [("embedding_repeats/ids", ids), ("embedding_repeats/dy", dy), ("embedding_repeats/d0", d0),
            ("embedding_repeats/out", d0 + np64(tt.grad))]


def rmsnorm():
    ts = []
    for name, rows, cols, eps, scale in [("rows", 5, 24, 1e-6, 1.0), ("large", 3, 576, 1e-5, 100.0),
                                          ("tiny", 2, 16, 1e-5, 1e-3)]:
        x = randn(rows, cols, scale=scale)
        w = f32(1 + 0.1 * rng.standard_normal(cols))
        dy, dw0 = randn(rows, cols), randn(cols)
        xt, wt = t64(x, True), t64(w, True)
        eps32 = float(np.float32(eps))
        y = xt / torch.sqrt((xt ** 2).mean(dim=1, keepdim=True) + eps32) * wt
        y.backward(t64(dy))
        n = "rmsnorm_" + name
        ts += [(n + "/x", x), (n + "/weight", w), (n + "/eps", [eps]), (n + "/dy", dy), (n + "/dw0", dw0),
               (n + "/dx", np64(xt.grad)), (n + "/dweight", dw0 + np64(wt.grad))]
    return ts


def rope_fwd(x, pos, head_dim, theta):
    """Hugging Face rotate_half RoPE; float32 inverse frequencies and angles
    as in HF, the rotation in float64."""
    half = head_dim // 2
    theta32 = float(np.float32(theta))
    inv_freq = f32(1.0 / theta32 ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    ang = (f32(pos)[:, None] * inv_freq[None, :]).astype(np.float64)
    cos = torch.tensor(np.concatenate([np.cos(ang)] * 2, axis=1))
    sin = torch.tensor(np.concatenate([np.sin(ang)] * 2, axis=1))
    t = x.shape[0]
    xh = x.reshape(t, -1, head_dim)
    rot = torch.cat([-xh[..., half:], xh[..., :half]], dim=-1)
    return (xh * cos[:, None, :] + rot * sin[:, None, :]).reshape(t, -1)


def rope():
    ts = []
    for name, heads, hd, theta, pos in [("llama", 3, 8, 10000.0, [0, 1, 7, 1000]),
                                        ("qwen", 2, 64, 1000000.0, [5, 4096, 30000])]:
        pos = np.array(pos)
        x, dy = randn(len(pos), heads * hd), randn(len(pos), heads * hd)
        xt = t64(x, True)
        rope_fwd(xt, pos, hd, theta).backward(t64(dy))
        n = "rope_" + name
        ts += [(n + "/dy", dy), (n + "/pos", pos), (n + "/head_dim", [hd]), (n + "/theta", [theta]),
               (n + "/dx", np64(xt.grad))]
    return ts


def attention_fwd(q, k, v, n_heads, n_kv):
    """Causal GQA attention of a full pass, one head at a time."""
    t = q.shape[0]
    hd = q.shape[1] // n_heads
    group = n_heads // n_kv
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    outs = []
    for h in range(n_heads):
        g = h // group
        qh, kh, vh = q[:, h * hd:(h + 1) * hd], k[:, g * hd:(g + 1) * hd], v[:, g * hd:(g + 1) * hd]
        scores = (qh @ kh.T / np.sqrt(hd)).masked_fill(mask, float("-inf"))
        outs.append(torch.softmax(scores, dim=1) @ vh)
    return torch.cat(outs, dim=1)


def attention():
    ts = []
    for name, t, nh, nkv, hd in [("mha", 5, 2, 2, 4), ("gqa3", 7, 6, 2, 4), ("mqa", 9, 3, 1, 8),
                                 # more rows than one work item of the CPU kernel takes
                                 ("long", 70, 9, 3, 8), ("one", 1, 3, 3, 4)]:
        q, k, v = randn(t, nh * hd, scale=2.0), randn(t, nkv * hd, scale=2.0), randn(t, nkv * hd)
        dy = randn(t, nh * hd)
        qt, kt, vt = t64(q, True), t64(k, True), t64(v, True)
        attention_fwd(qt, kt, vt, nh, nkv).backward(t64(dy))
        n = "attention_" + name
        ts += [(n + "/q", q), (n + "/k", k), (n + "/v", v), (n + "/dy", dy), (n + "/heads", [nh, nkv]),
               (n + "/dq", np64(qt.grad)), (n + "/dk", np64(kt.grad)), (n + "/dv", np64(vt.grad))]
    return ts


def swiglu():
    ts = []
    g1 = f32([[0, 1, -1, 20, -20, 80, -80, 1e-4, -0.5, 3]])
    for name, gate in [("edges", g1), ("random", randn(4, 37, scale=3.0))]:
        up, dy = randn(*gate.shape), randn(*gate.shape)
        gt, ut = t64(gate, True), t64(up, True)
        (torch.nn.functional.silu(gt) * ut).backward(t64(dy))
        n = "swiglu_" + name
        ts += [(n + "/gate", gate), (n + "/up", up), (n + "/dy", dy), (n + "/dgate", np64(gt.grad)),
               (n + "/dup", np64(ut.grad))]
    return ts


def logprobs():
    ts = []
    small = randn(4, 50, scale=3.0)
    small[1, :4] = [1000, 1000, -1000, 0]  # huge logits, a tie for the maximum
    small[2, :] = 7.5                      # uniform row
    small[3, :] *= 30                      # one token takes nearly all the mass
    for name, x, targets in [("small", small, [0, 2, 49, int(np.argmax(small[3]))]),
                             ("wide", randn(2, 3000, scale=4.0), [17, 2999])]:
        dlogp = randn(len(targets))
        xt = t64(x, True)
        logp = torch.log_softmax(xt, dim=1)[torch.arange(len(targets)), torch.tensor(targets)]
        logp.backward(t64(dlogp))
        n = "logprobs_" + name
        ts += [(n + "/logits", x), (n + "/targets", targets), (n + "/dlogp", dlogp),
               (n + "/logp", np64(logp)), (n + "/dlogits", np64(xt.grad))]
    return ts


def adamw():
    """Three torch.optim.AdamW steps on float32 tensors from zero moments.
    Hyper-parameters are float32 values, as the Go side receives them."""
    ts = []
    for name, lr, b1, b2, eps, wd in [("default", 1e-3, 0.9, 0.999, 1e-8, 0.1),
                                      ("lowbeta", 1e-2, 0.4, 0.9, 1e-6, 0.5)]:
        lr, b1, b2, eps, wd = (float(np.float32(h)) for h in (lr, b1, b2, eps, wd))
        p0 = randn(300)
        grads = [randn(300, scale=s) for s in (1.0, 1e-3, 10.0)]
        p = torch.tensor(p0, requires_grad=True)
        opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
        for g in grads:
            p.grad = torch.tensor(g)
            opt.step()
        st = opt.state[p]
        n = "adamw_" + name
        ts += [(n + "/p0", p0), (n + "/hyper", [lr, b1, b2, eps, wd])]
        ts += [(n + "/g%d" % (i + 1), g) for i, g in enumerate(grads)]
        ts += [(n + "/p", p.detach().numpy()), (n + "/m", st["exp_avg"].numpy()),
               (n + "/v", st["exp_avg_sq"].numpy())]
    return ts


def sumsquares():
    x = randn(5000, scale=3.0)
    return [("sumsquares_random/x", x), ("sumsquares_random/out", [torch.sum(t64(x) ** 2).item()])]


def write(path, tensors):
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<II", VERSION, len(tensors)))
        for name, t in tensors:
            t = f32(t)
            b = name.encode()
            f.write(struct.pack("<I", len(b)) + b)
            f.write(struct.pack("<I", t.ndim) + struct.pack("<%dI" % t.ndim, *t.shape))
            f.write(t.astype("<f4").tobytes())
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    ts = []
    for gen in (linear, embedding, rmsnorm, rope, attention, swiglu, logprobs, adamw, sumsquares):
        ts += gen()
    write(os.path.join(OUT, "grads.golden"), ts)
