#!/usr/bin/env python3
"""Writes the seed corpus of the io fuzz targets (deterministic, stdlib only).

    python3 tests/fuzz/make_seed_corpus.py     # rewrites tests/fuzz/corpus/

Names state the outcome the target must report (fuzz_driver.cc):
ok__*, data_loss__*, invalid_argument__*, not_found__*. Regression seeds for bugs found by
fuzzing go in corpus/<target>/ by hand, named the same way.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def safetensors(header, data=b"", raw_header=None, length=None, pad=True):
    text = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    n = len(text) if length is None else length
    return struct.pack("<Q", n) + text + data


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


def safetensors_seeds():
    meta = {"__metadata__": {"format": "pt"}}
    two = {**meta,
           "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
           "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]}}
    two_data = f32(1, 2, 3, 4, 5, 6) + struct.pack("<2q", -7, 8)
    valid = safetensors(two, two_data)
    many = {}
    data = b""
    for name, dtype, shape, nbytes in [("bool", "BOOL", [3], 3), ("u8", "U8", [2], 2), ("f16", "F16", [2], 4),
                                       ("bf16", "BF16", [1, 2], 4), ("f64", "F64", [], 8), ("f4", "F4", [4], 2),
                                       ("f8", "F8_E4M3", [2], 2), ("empty", "F32", [0, 5], 0)]:
        many[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + nbytes]}
        data += bytes(range(1, nbytes + 1))
    return {
        "ok__two_tensors.safetensors": valid,
        "ok__many_dtypes.safetensors": safetensors(many, data),
        "ok__empty_header.safetensors": safetensors({}),
        "ok__metadata_only.safetensors": safetensors(meta),
        "ok__scalar.safetensors": safetensors({"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}, f32(3)),
        "data_loss__shorter_than_length.safetensors": b"\x10\x00\x00",
        "data_loss__empty_file.safetensors": b"",
        "data_loss__truncated_data.safetensors": valid[:-5],
        "data_loss__truncated_header.safetensors": valid[:20],
        "data_loss__header_length_past_end.safetensors": safetensors(two, two_data, length=len(valid)),
        "data_loss__bytes_after_last_tensor.safetensors": valid + b"\0" * 4,
        "data_loss__offset_past_end.safetensors": safetensors(
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [1 << 40], "data_offsets": [8, 8 + (4 << 40)]}}, f32(1, 2, 3)),
        "invalid_argument__oversized_header.safetensors": safetensors(two, two_data, length=100_000_001),
        "invalid_argument__header_length_max_u64.safetensors": safetensors(two, two_data, length=2**64 - 1),
        "invalid_argument__wrong_dtype.safetensors": safetensors(
            {"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)),
        "invalid_argument__dtype_not_string.safetensors": safetensors(
            {"a": {"dtype": 32, "shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)),
        "invalid_argument__dtype_shape_mismatch.safetensors": safetensors(
            {"a": {"dtype": "F64", "shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)),
        "invalid_argument__lying_offsets_overlap.safetensors": safetensors(
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, f32(1, 2, 3)),
        "invalid_argument__lying_offsets_gap.safetensors": safetensors(
            {"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, f32(1, 2)),
        "invalid_argument__offsets_reversed.safetensors": safetensors(
            {"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}}, f32(1, 2)),
        "invalid_argument__offset_max_u64.safetensors": safetensors(
            {"a": {"dtype": "U8", "shape": [1], "data_offsets": [2**64 - 2, 2**64 - 1]}}, b"\1"),
        "invalid_argument__shape_overflow.safetensors": safetensors(
            {"a": {"dtype": "F32", "shape": [2**32, 2**32, 16], "data_offsets": [0, 4]}}, f32(1)),
        "invalid_argument__negative_dim.safetensors": safetensors(
            {"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, f32(1)),
        "invalid_argument__odd_f4.safetensors": safetensors(
            {"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"\1\2"),
        "invalid_argument__not_json.safetensors": safetensors(None, raw_header=b"{not json"),
        "invalid_argument__not_object.safetensors": safetensors(None, raw_header=b"[1, 2]"),
        "invalid_argument__duplicate_key.safetensors": safetensors(
            None, f32(1),
            raw_header=b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                       b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'),
        "invalid_argument__metadata_not_strings.safetensors": safetensors({"__metadata__": {"step": 1}}),
        "invalid_argument__bad_utf8.safetensors": safetensors(None, raw_header=b'{"\xff":1}'),
        # Regression: a deeply nested header overflowed the stack (error excerpts recurse).
        "invalid_argument__deep_nesting_regression.safetensors": safetensors(
            None, raw_header=b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        "invalid_argument__nesting_65_levels.safetensors": safetensors(
            None, raw_header=b'{"__metadata__":' + b'{"a":' * 63 + b'"x"' + b"}" * 64),
        "invalid_argument__missing_shape.safetensors": safetensors(
            {"a": {"dtype": "F32", "data_offsets": [0, 4]}}, f32(1)),
    }


def shard(count, tokens=None, magic=20240520, version=1, extra=b""):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, count
    if tokens is None:
        tokens = list(range(max(count, 0)))
    return struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens) + extra


def token_shard_seeds():
    return {
        "ok__five_tokens.bin": shard(5, [50256, 0, 1, 65535, 42]),
        "ok__no_tokens.bin": shard(0),
        "data_loss__truncated.bin": shard(5, [1, 2, 3, 4, 5])[:-3],
        "data_loss__extra_token.bin": shard(2, [1, 2, 3]),
        "data_loss__odd_byte.bin": shard(2, [1, 2], extra=b"\0"),
        "data_loss__short_header.bin": shard(0)[:100],
        "data_loss__empty_file.bin": b"",
        "data_loss__count_int32_max.bin": shard(2**31 - 1, [1, 2]),
        "invalid_argument__bad_magic.bin": shard(1, [1], magic=12345),
        "invalid_argument__llama3_magic.bin": shard(1, [1], magic=20240801),
        "invalid_argument__bad_version.bin": shard(1, [1], version=2),
        "invalid_argument__negative_count.bin": shard(-1, []),
        "invalid_argument__count_int32_min.bin": shard(-2**31, []),
    }


def index(weight_map, **extra):
    return json.dumps({"metadata": {"total_size": 25}, "weight_map": weight_map, **extra}).encode()


def sharded_index_seeds():
    """Indexes beside model-00001-of-00002.safetensors (a, b) and model-00002-of-00002 (c)."""
    one, two = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    return {
        "ok__both_files.json": index({"a": one, "b": one, "c": two}),
        "ok__no_metadata.json": json.dumps({"weight_map": {"c": two}}).encode(),
        "ok__empty_weight_map.json": index({}),
        "invalid_argument__tensor_not_in_file.json": index({"a": one, "b": one, "c": one}),
        "invalid_argument__file_tensor_not_listed.json": index({"a": one, "c": two}),
        "invalid_argument__absolute_path.json": index({"a": "/etc/passwd"}),
        "invalid_argument__climbs_out.json": index({"a": "../" + one}),
        "invalid_argument__not_a_string.json": index({"a": 1}),
        "invalid_argument__no_weight_map.json": json.dumps({"metadata": {}}).encode(),
        "invalid_argument__not_json.json": b'{"weight_map": {',
        "invalid_argument__index_is_not_safetensors.json": index({"a": "model.safetensors.index.json"}),
        "not_found__missing_file.json": index({"a": "model-00003-of-00003.safetensors"}),
    }


def main():
    for folder, seeds in (("safetensors", safetensors_seeds()), ("token_shard", token_shard_seeds()),
                          ("sharded_index", sharded_index_seeds())):
        out = os.path.join(HERE, "corpus", folder)
        os.makedirs(out, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
        print(f"{out}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
