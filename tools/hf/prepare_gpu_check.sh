#!/usr/bin/env bash
# Prepares the Hugging Face logits check for the GPU host (run here, with network):
#
#   tools/hf/prepare_gpu_check.sh        # -> .gpu_wheels/ (about 45 MB, not committed)
#
# .gpu_wheels/*.whl    transformers and every dependency it has besides torch, for
#                      CPython 3.12 manylinux x86_64 (the GPU host: Ubuntu 24.04, torch
#                      installed, no network); pip installs only what is missing there
# .gpu_wheels/hf_case  a tiny GPT-2 checkpoint (io/checkpoint) and our float32 logits
#                      for fixed tokens (//tools/hf:write_gpt2_logits_case)
#
# Then on the GPU host, with .gpu_wheels carried along: tools/hf/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
version="${TRANSFORMERS_VERSION:-5.23.0}"  # needs torch >= 2.6 and Python >= 3.11
mkdir -p .gpu_wheels
python3 -m pip download -q "transformers==$version" -d .gpu_wheels --only-binary=:all: \
  --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64
echo "$version" > .gpu_wheels/TRANSFORMERS_VERSION
bazel build //tools/hf:write_gpt2_logits_case
rm -rf .gpu_wheels/hf_case
bazel-bin/tools/hf/write_gpt2_logits_case .gpu_wheels/hf_case
du -sh .gpu_wheels
