#!/usr/bin/env python3
"""Writes ../quant_golden.gguf: reference (de)quantisation data for the Go
reader, produced by the `gguf` Python package (the llama.cpp project's own
gguf-py), plus one metadata entry of every GGUF value type.

Run from kernels/gguf/testdata/gen:

    python3 -m venv /tmp/ggufgen && /tmp/ggufgen/bin/pip install -r requirements.txt
    /tmp/ggufgen/bin/python gen_quant.py

For each type T the file holds tensors
    T.input    F32, the float input (absent for Q4_K/Q6_K, see below)
    T.quant    raw bytes of type T: gguf.quants.quantize(input, T)
    T.dequant  F32, gguf.quants.dequantize(T.quant, T)
Q4_K and Q6_K have no quantiser in gguf-py, so their T.quant blocks are random
bytes with sane f16 scales, and only dequantisation is checked.
Q5_0 and Q5_1 (added later, written last so the tensors above are unchanged):
rows 0 and 1 of T.quant are gguf.quants.quantize of a random input, row 2 is
random bytes with sane f16 scales (every fifth-bit pattern); frognano only
dequantises them, so no T.input is written.
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize, dequantize

GOLDEN_VERSION = 1
ROW, ROWS = 256, 3  # 3 rows of 256 elements each, 768 elements per type

rng = np.random.default_rng(20240607)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "quant_golden.gguf")
w = gguf.GGUFWriter(out, arch="golden")

w.add_uint32("frognano.golden_version", GOLDEN_VERSION)
# One entry of every metadata value type, checked by TestPythonWrittenMetadata.
w.add_uint8("t.u8", 200)
w.add_int8("t.i8", -100)
w.add_uint16("t.u16", 60000)
w.add_int16("t.i16", -30000)
w.add_uint32("t.u32", 4000000000)
w.add_int32("t.i32", -2000000000)
w.add_float32("t.f32", 3.25)
w.add_uint64("t.u64", 18000000000000000000)
w.add_int64("t.i64", -9000000000000000000)
w.add_float64("t.f64", -1.0e300)
w.add_bool("t.bool", True)
w.add_string("t.str", "héllo ✓ 世界")
w.add_array("t.arr_i32", [1, -2, 3])
w.add_array("t.arr_str", ["a", "", "ü"])
w.add_array("t.arr_f32", [0.5, -1.5])
w.add_array("t.arr_bool", [True, False])
w.add_array("t.arr_arr", [[1, 2], [3]])


def f32_input(qtype):
    x = rng.standard_normal(ROW * ROWS).astype(np.float32) * 2.0
    x[5] = 0.0
    if qtype == Q.F16:
        # edge cases for float->half rounding: subnormals, overflow, ties
        edge = [0.0, -0.0, 1e-8, -3e-7, 6.1e-5, 65504.0, 65520.0, 70000.0, -1e6, 1.0009765625, 1.00048828125, 2049.0]
        x[: len(edge)] = edge
    if qtype == Q.BF16:
        edge = [0.0, -0.0, 1.00390625, 1.01171875, 3.4e38, -1e-40]
        x[: len(edge)] = edge
    if qtype in (Q.Q4_0, Q.Q4_1, Q.Q8_0):
        x[32:64] = 0.0  # an all-zero block (d == 0)
        x[64:96] = 1.5  # a constant block
    return x


for qtype in (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1):
    x = f32_input(qtype).reshape(ROWS, ROW)
    q = quantize(x, qtype)
    y = dequantize(q, qtype).astype(np.float32)
    w.add_tensor(f"{qtype.name}.input", x)
    w.add_tensor(f"{qtype.name}.quant", q.view(np.uint8).reshape(ROWS, -1) if qtype in (Q.F16, Q.BF16) else q, raw_dtype=qtype)
    w.add_tensor(f"{qtype.name}.dequant", y)


def random_f16(n, lo, hi):
    mag = rng.uniform(lo, hi, n) * rng.choice([-1.0, 1.0], n)
    return mag.astype(np.float16)


def k_blocks(qtype, nblocks):
    if qtype == Q.Q4_K:
        # {f16 d, f16 dmin, u8 scales[12], u8 qs[128]}
        b = rng.integers(0, 256, size=(nblocks, 144), dtype=np.uint8)
        b[:, 0:2] = random_f16(nblocks, 1e-3, 0.05).view(np.uint8).reshape(nblocks, 2)
        b[:, 2:4] = random_f16(nblocks, 1e-3, 0.05).view(np.uint8).reshape(nblocks, 2)
        return b
    # Q6_K: {u8 ql[128], u8 qh[64], i8 scales[16], f16 d}
    b = rng.integers(0, 256, size=(nblocks, 210), dtype=np.uint8)
    b[:, 208:210] = random_f16(nblocks, 1e-4, 0.01).view(np.uint8).reshape(nblocks, 2)
    return b


for qtype in (Q.Q4_K, Q.Q6_K):
    blocks = k_blocks(qtype, ROWS * ROW // 256)
    q = blocks.reshape(ROWS, -1)
    y = dequantize(q, qtype).astype(np.float32)
    w.add_tensor(f"{qtype.name}.quant", q, raw_dtype=qtype)
    w.add_tensor(f"{qtype.name}.dequant", y)

for qtype in (Q.Q5_0, Q.Q5_1):
    x = (rng.standard_normal(ROW * 2).astype(np.float32) * 2.0).reshape(2, ROW)
    x[0, 32:64] = 0.0  # an all-zero block (d == 0)
    x[0, 64:96] = 1.5  # a constant block
    q = quantize(x, qtype)
    nb = ROW // 32
    bs = q.shape[1] // nb
    rand = rng.integers(0, 256, size=(nb, bs), dtype=np.uint8)
    rand[:, 0:2] = random_f16(nb, 1e-3, 0.05).view(np.uint8).reshape(nb, 2)
    if qtype == Q.Q5_1:
        rand[:, 2:4] = random_f16(nb, 1e-3, 0.5).view(np.uint8).reshape(nb, 2)
    q = np.concatenate([q, rand.reshape(1, -1)], axis=0)
    y = dequantize(q, qtype).astype(np.float32)
    w.add_tensor(f"{qtype.name}.quant", q, raw_dtype=qtype)
    w.add_tensor(f"{qtype.name}.dequant", y)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", out, os.path.getsize(out), "bytes")
