#!/usr/bin/env python3
"""Writes the golden files for the kernel conformance tests (kernels/kernelstest).

Run from anywhere:  python3 kernels/testdata/gen/gen_ops.py
It needs only NumPy, draws every input from a fixed seed, and so rewrites the
files byte for byte; the tests never regenerate them. Every reference is
computed here, in float64 from the float32 inputs, the textbook way, without
looking at the Go code: a Go kernel that passes agrees with NumPy, not with
itself.

File format (little endian), one file per operation, <op>.golden:

    file   = magic "FNGT" | version u32 (= 1) | count u32 | count × tensor
    tensor = name_len u32 | name (UTF-8) | ndim u32 | ndim × dim u32
             | prod(dims) × float32

Names are "<case>/<tensor>". Integer parameters (token ids, positions, head
counts) are stored as float32 tensors; they are small enough to be exact.
"""

import os
import struct

import numpy as np

MAGIC = b"FNGT"
VERSION = 1
OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
rng = np.random.default_rng(20250101)


def f32(x):
    return np.asarray(x, dtype=np.float32)


def randn(*shape, scale=1.0):
    return f32(rng.standard_normal(shape) * scale)


def write(op, tensors):
    path = os.path.join(OUT, op + ".golden")
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<II", VERSION, len(tensors)))
        for name, t in tensors:
            t = f32(t)
            b = name.encode()
            f.write(struct.pack("<I", len(b)) + b)
            f.write(struct.pack("<I", t.ndim) + struct.pack("<%dI" % t.ndim, *t.shape))
            f.write(t.astype("<f4").tobytes())
    print("wrote", path, os.path.getsize(path), "bytes")


def matmul():
    ts = []
    for m, n, k in [(1, 7, 5), (3, 17, 33), (16, 48, 64), (9, 130, 20), (8, 5, 1)]:
        a, b = randn(m, k), randn(n, k)
        c = a.astype(np.float64) @ b.astype(np.float64).T
        name = "m%dn%dk%d" % (m, n, k)
        ts += [(name + "/a", a), (name + "/b", b), (name + "/out", c)]
    write("matmul", ts)


def embedding():
    table = randn(11, 6)
    ids = np.array([3, 0, 10, 3, 7])
    write("embedding", [("small/table", table), ("small/ids", ids), ("small/out", table[ids])])


def rmsnorm():
    ts = []
    for name, rows, cols, eps, scale in [("row", 1, 8, 1e-5, 1.0), ("rows", 5, 24, 1e-6, 1.0),
                                          ("large", 3, 576, 1e-5, 100.0), ("tiny", 2, 16, 1e-5, 1e-3)]:
        x = randn(rows, cols, scale=scale)
        w = f32(1 + 0.1 * rng.standard_normal(cols))
        x64 = x.astype(np.float64)
        eps32 = float(np.float32(eps))
        y = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + eps32) * w
        ts += [(name + "/x", x), (name + "/weight", w), (name + "/eps", [eps]), (name + "/out", y)]
    write("rmsnorm", ts)


def rope_ref(x, pos, head_dim, theta):
    """Hugging Face Llama/Qwen rotate_half RoPE. As in HF the inverse
    frequencies and the angles are float32; cos and sin are then exact."""
    half = head_dim // 2
    theta32 = float(np.float32(theta))
    inv_freq = f32(1.0 / theta32 ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    ang = f32(pos)[:, None] * inv_freq[None, :]  # float32 product, like HF
    assert ang.dtype == np.float32
    cos = np.cos(ang.astype(np.float64))
    sin = np.sin(ang.astype(np.float64))
    cos = np.concatenate([cos, cos], axis=1)
    sin = np.concatenate([sin, sin], axis=1)
    t = x.shape[0]
    xh = x.astype(np.float64).reshape(t, -1, head_dim)
    rot = np.concatenate([-xh[..., half:], xh[..., :half]], axis=-1)
    y = xh * cos[:, None, :] + rot * sin[:, None, :]
    return y.reshape(t, -1)


def rope():
    ts = []
    for name, heads, hd, theta, pos in [("llama", 3, 8, 10000.0, [0, 1, 7, 1000]),
                                        ("qwen", 2, 64, 1000000.0, [5, 4096, 30000]),
                                        ("pair", 1, 2, 10000.0, [0, 1, 2, 3, 4])]:
        pos = np.array(pos)
        x = randn(len(pos), heads * hd)
        ts += [(name + "/x", x), (name + "/pos", pos), (name + "/head_dim", [hd]),
               (name + "/theta", [theta]), (name + "/out", rope_ref(x, pos, hd, theta))]
    write("rope", ts)


def attention_ref(q, k, v, n_heads, n_kv):
    """Causal GQA attention, one head at a time with an explicit mask."""
    t, s = q.shape[0], k.shape[0]
    hd = q.shape[1] // n_heads
    group = n_heads // n_kv
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    out = np.zeros((t, n_heads * hd))
    qpos = np.arange(s - t, s)[:, None]
    kpos = np.arange(s)[None, :]
    mask = kpos > qpos
    for h in range(n_heads):
        g = h // group
        qh = q64[:, h * hd:(h + 1) * hd]
        kh = k64[:, g * hd:(g + 1) * hd]
        vh = v64[:, g * hd:(g + 1) * hd]
        scores = qh @ kh.T / np.sqrt(hd)
        scores[mask] = -np.inf
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=1, keepdims=True)
        out[:, h * hd:(h + 1) * hd] = p @ vh
    return out


def attention():
    ts = []
    for name, t, s, nh, nkv, hd in [("mha_prefill", 5, 5, 2, 2, 4),
                                    ("gqa_prefill", 7, 7, 4, 2, 8),
                                    ("gqa_chunk", 3, 9, 6, 2, 8),
                                    ("mqa_decode", 1, 12, 3, 1, 16),
                                    ("smollm2", 16, 16, 9, 3, 64),
                                    # more rows than one work item of the CPU kernel takes
                                    ("long_prefill", 80, 80, 4, 2, 8),
                                    ("long_chunk", 70, 100, 2, 1, 8)]:
        q, k, v = randn(t, nh * hd, scale=2.0), randn(s, nkv * hd, scale=2.0), randn(s, nkv * hd)
        ts += [(name + "/q", q), (name + "/k", k), (name + "/v", v), (name + "/heads", [nh, nkv]),
               (name + "/out", attention_ref(q, k, v, nh, nkv))]
    write("attention", ts)


def swiglu():
    ts = []
    g1 = f32([[0, 1, -1, 20, -20, 100, -100, 1e-4, -0.5, 3]])
    for name, gate in [("edges", g1), ("random", randn(4, 37, scale=3.0))]:
        up = randn(*gate.shape)
        g = gate.astype(np.float64)
        out = g / (1 + np.exp(-g)) * up
        ts += [(name + "/gate", gate), (name + "/up", up), (name + "/out", out)]
    write("swiglu", ts)


def softmax():
    x = randn(6, 50, scale=3.0)
    x[1, :4] = [1000, 1000, -1000, 0]
    x[2, :] = 7.5
    x[3, 10] = -np.inf
    x[4, :] *= 30
    x64 = x.astype(np.float64)
    m = x64.max(axis=1, keepdims=True)
    lse = m + np.log(np.exp(x64 - m).sum(axis=1, keepdims=True))
    write("softmax", [("rows/x", x), ("rows/softmax", np.exp(x64 - lse)), ("rows/logsoftmax", x64 - lse)])


def add():
    a, b = randn(3, 5), randn(3, 5)
    write("add", [("small/a", a), ("small/b", b), ("small/out", a.astype(np.float64) + b)])


if __name__ == "__main__":
    with np.errstate(over="ignore"):
        for gen in (matmul, embedding, rmsnorm, rope, attention, swiglu, softmax, add):
            gen()
