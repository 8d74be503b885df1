#!/usr/bin/env bash
# On the GPU host (no network): installs transformers from .gpu_wheels if it is
# missing, then runs check_gpt2_lm_head.py on .gpu_wheels/hf_case, on the GPU when
# torch sees one. Prints the result and keeps it in $OUT/hf_gpt2_lm_head.txt when
# $OUT is set. Exit status: the check's. Prepare with tools/hf/prepare_gpu_check.sh.
#
#   tools/hf/gpu_check.sh [CASE_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
case_dir="${1:-.gpu_wheels/hf_case}"
version="$(cat .gpu_wheels/TRANSFORMERS_VERSION 2>/dev/null || echo 5.23.0)"
if ! python3 -c "import transformers" 2>/dev/null; then
  # The host's machine is lent fresh: installing into its Python is harmless, and
  # pip leaves torch and whatever else already satisfies transformers' needs alone.
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --no-index --find-links .gpu_wheels \
    "transformers==$version"
fi
device=cpu
if python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then device=cuda; fi
log="${OUT:+$OUT/hf_gpt2_lm_head.txt}"
python3 tools/hf/check_gpt2_lm_head.py "$case_dir/step_000001" "$case_dir/logits.safetensors" \
  --device "$device" 2>&1 | grep -v "Loading weights" | tee "${log:-/dev/null}"
exit "${PIPESTATUS[0]}"
