#!/usr/bin/env python3
"""Writes ../python.safetensors with the `safetensors` Python package and
../python_expected.json with what each tensor holds, for the Go reader test.

    python3 -m venv /tmp/stgen && /tmp/stgen/bin/pip install -r requirements.txt
    /tmp/stgen/bin/python gen.py
"""
import json
import os

import numpy as np
from safetensors import TensorSpec, serialize_file, safe_open

GOLDEN_VERSION = 1
here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "..", "python.safetensors")
rng = np.random.default_rng(7)


def bf16_bits(x):
    # round to nearest even, as torch.Tensor.to(torch.bfloat16) does
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


arrays = {
    "model.embed_tokens.weight": ("float32", rng.standard_normal((4, 3)).astype(np.float32)),
    "model.layers.0.mlp.up_proj.weight": ("float16", rng.standard_normal((2, 5)).astype(np.float16)),
    "model.layers.0.input_layernorm.weight": ("bfloat16", bf16_bits(rng.standard_normal(7) * 3)),
    "model.norm.weight": ("float32", np.array([1.0, -2.5, 3.25], dtype=np.float32)),
    "scalar": ("float32", np.array(42.0, dtype=np.float32)),
    "empty": ("float32", np.zeros((0, 3), dtype=np.float32)),
    "lm_head.weight": ("bfloat16", bf16_bits(np.array([[1.0, 2.0], [-0.0, 1e-3]], dtype=np.float32))),
}
specs = {
    name: TensorSpec(dtype=dt, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
    for name, (dt, a) in arrays.items()
}
metadata = {"format": "pt", "frognano": "golden-1"}
serialize_file(specs, out, metadata=metadata)

expected = {"golden_version": GOLDEN_VERSION, "metadata": metadata, "tensors": {}}
with safe_open(out, framework="np") as f:
    assert f.metadata() == metadata
    for name, (dt, a) in arrays.items():
        if dt == "bfloat16":
            vals = (a.astype(np.uint32) << 16).view(np.float32)
            dtype = "BF16"
        else:
            vals = f.get_tensor(name).astype(np.float32)
            dtype = {"float32": "F32", "float16": "F16"}[dt]
        expected["tensors"][name] = {
            "dtype": dtype,
            "shape": list(a.shape),
            "values": [float(v) for v in vals.reshape(-1)],
        }

with open(out, "rb") as fh:
    n = int.from_bytes(fh.read(8), "little")
    expected["header"] = fh.read(n).decode()
with open(os.path.join(here, "..", "python_expected.json"), "w") as fh:
    json.dump(expected, fh, indent=1)
print("wrote", out, os.path.getsize(out), "bytes")
