#!/usr/bin/env python3
"""Writes io/safetensors/testdata/python_fixture.safetensors with Hugging Face's
own `safetensors` package, so the C++ reader is tested on a file it did not write.

    python3 -m pip install safetensors==0.8.0 numpy
    python3 tools/data/make_safetensors_fixture.py

The tensors (one per dtype colossal maps, plus I8, BOOL, a scalar, a zero-size
tensor and a 3-d one) are listed in TENSORS below; io/safetensors/
fixture_tensors.cc lists the same names, shapes and values for the C++ tests,
and tools/data/check_safetensors_interop.py checks files against this list.
Re-runs can differ in the header's byte order (the package writes
__metadata__ from a hash map), never in tensors or values.
"""
import os
import sys

import numpy as np
import safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "..", "io", "safetensors", "testdata",
                                    "python_fixture.safetensors"))

METADATA = {"format": "np", "made_by": "tools/data/make_safetensors_fixture.py"}


def _bf16(values):
    """bfloat16 bits of float32 values that bfloat16 holds exactly."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    assert np.all(bits & 0xFFFF == 0), "values must be exact in bfloat16"
    return (bits >> 16).astype(np.uint16)


# name -> (safetensors dtype, numpy array holding the little-endian bytes)
TENSORS = {
    "f32": ("F32", (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3)),
    "f16": ("F16", (np.arange(6, dtype=np.float16) * 0.5 - 1).reshape(3, 2)),
    "bf16": ("BF16", _bf16([1.0, -2.0, 0.5, 3.140625])),
    "f64": ("F64", np.array([[1e100, -2.5]], dtype=np.float64)),
    "i32": ("I32", np.array([-2, -1, 0, 1, 2], dtype=np.int32)),
    "i64": ("I64", np.array([-(2**40), 2**40], dtype=np.int64)),
    "u8": ("U8", np.arange(7, dtype=np.uint8)),
    "u16": ("U16", np.array([0, 65535, 12345], dtype=np.uint16)),
    "i8": ("I8", np.array([-128, 127], dtype=np.int8)),
    "bool": ("BOOL", np.array([True, False, True])),
    "scalar": ("F32", np.array(3.25, dtype=np.float32)),
    "empty": ("F32", np.zeros((0, 4), dtype=np.float32)),
    "model.layers.0.weight": ("F32", np.arange(24, dtype=np.float32).reshape(2, 3, 4)),
}

# safetensors' TensorSpec dtype names.
_SPEC_DTYPE = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
               "I32": "int32", "I64": "int64", "U8": "uint8", "U16": "uint16", "I8": "int8",
               "BOOL": "bool"}


def expected_bytes(name):
    dtype, array = TENSORS[name]
    return dtype, list(array.shape), array.astype(array.dtype.newbyteorder("<")).tobytes(order="C")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else OUT
    # np.ascontiguousarray would make the scalar 1-d; copy keeps shape ().
    arrays = {name: array.copy(order="C") for name, (_, array) in TENSORS.items()}
    specs = {
        name: safetensors.TensorSpec(dtype=_SPEC_DTYPE[dtype], shape=list(arrays[name].shape),
                                     data_ptr=arrays[name].ctypes.data, data_len=arrays[name].nbytes)
        for name, (dtype, _) in TENSORS.items()
    }
    safetensors.serialize_file(specs, out, metadata=METADATA)
    print(f"wrote {out} ({os.path.getsize(out)} bytes) with safetensors {safetensors.__version__}")


if __name__ == "__main__":
    main()
