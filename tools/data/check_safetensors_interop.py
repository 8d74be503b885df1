#!/usr/bin/env python3
"""Checks that Hugging Face's `safetensors` package reads what colossal's
writer wrote: the tensors of make_safetensors_fixture.py's TENSORS, in one
file and sharded with a model.safetensors.index.json. Not run in CI (it needs
the Python package); run it after changing io/safetensors:

    python3 -m pip install safetensors numpy
    bazel build //io/safetensors:write_interop_files
    bazel-bin/io/safetensors/write_interop_files /tmp/interop
    python3 tools/data/check_safetensors_interop.py /tmp/interop
"""
import json
import os
import sys

import numpy as np
import safetensors
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_safetensors_fixture import METADATA, TENSORS, expected_bytes  # noqa: E402


def check_file(path, names):
    """Checks the tensors `names` of `path`; returns their byte count."""
    with open(path, "rb") as f:
        raw = f.read()
    # deserialize gives every dtype as bytes (numpy has no bfloat16).
    got = dict(safetensors.deserialize(raw))
    assert sorted(got) == sorted(names), f"{path}: tensors {sorted(got)} != {sorted(names)}"
    total = 0
    for name in names:
        dtype, shape, data = expected_bytes(name)
        t = got[name]
        assert _same_dtype(t["dtype"], dtype), f"{path}: {name}: dtype {t['dtype']} != {dtype}"
        assert list(t["shape"]) == shape, f"{path}: {name}: shape {t['shape']} != {shape}"
        assert bytes(t["data"]) == data, f"{path}: {name}: data differs"
        total += len(data)
    with safe_open(path, framework="numpy") as f:
        assert f.metadata() == METADATA, f"{path}: metadata {f.metadata()} != {METADATA}"
        for name in names:
            if TENSORS[name][0] == "BF16":
                continue
            array = f.get_tensor(name)
            want = TENSORS[name][1]
            assert array.dtype == want.dtype and array.shape == want.shape, f"{path}: {name}"
            assert np.array_equal(array, want), f"{path}: {name}: values differ"
    return total


def _same_dtype(python_name, safetensors_name):
    """deserialize names dtypes as headers do ("BF16"), or as numpy does ("bfloat16")."""
    names = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64", "int32": "I32",
             "int64": "I64", "uint8": "U8", "uint16": "U16", "int8": "I8", "bool": "BOOL"}
    return python_name == safetensors_name or names.get(python_name) == safetensors_name


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    single = os.path.join(out, "colossal.safetensors")
    check_file(single, list(TENSORS))
    print(f"ok: {single} ({len(TENSORS)} tensors)")

    folder = os.path.join(out, "sharded")
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        index = json.load(f)
    shards = sorted(set(index["weight_map"].values()))
    assert sorted(index["weight_map"]) == sorted(TENSORS), "index does not list every tensor"
    total = 0
    for shard in shards:
        names = [n for n, s in index["weight_map"].items() if s == shard]
        total += check_file(os.path.join(folder, shard), names)
    assert index["metadata"]["total_size"] == total, f"total_size {index['metadata']['total_size']} != {total}"
    print(f"ok: {folder} ({len(shards)} shards, total_size {total}) with safetensors {safetensors.__version__}")


if __name__ == "__main__":
    main()
