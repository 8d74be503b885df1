#!/usr/bin/env bash
# Installs GPT-2's byte-level BPE ranks in tiktoken format (base64 token, space,
# rank; 50256 lines) as ${COLOSSAL_DATA:-$HOME/.cache/colossal/data}/gpt2.tiktoken.
#
# The file is OpenAI's r50k/gpt2 ranks as shipped inside the openai-whisper
# package on PyPI (whisper/assets/gpt2.tiktoken), so the only network access is
# pip talking to PyPI. Idempotent: a present file with the pinned sha256 is left
# alone; a missing or different one is (re)installed atomically (temporary name
# in the same folder, then rename), so a reader never sees half a file.
#
#   tools/data/fetch_gpt2_ranks.sh              # prints the installed path
#   COLOSSAL_DATA=/data tools/data/fetch_gpt2_ranks.sh
#
# Tests and benchmarks that need the real ranks read COLOSSAL_GPT2_RANKS
# (e.g. bazel test --test_env=COLOSSAL_GPT2_RANKS=<printed path> //io/...).
set -euo pipefail

WHISPER_VERSION=20250625
# Same bytes as tiktoken's r50k_base/gpt2 ranks (tiktoken pins this hash too).
GPT2_TIKTOKEN_SHA256=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
MEMBER_SUFFIX=whisper/assets/gpt2.tiktoken

data_dir="${COLOSSAL_DATA:-$HOME/.cache/colossal/data}"
dest="$data_dir/gpt2.tiktoken"
say() { [[ -n "${COLOSSAL_SETUP_QUIET:-}" ]] || echo "fetch_gpt2_ranks: $*" >&2; }

sha256_of() { python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"; }

if [[ -f "$dest" ]]; then
  if [[ "$(sha256_of "$dest")" == "$GPT2_TIKTOKEN_SHA256" ]]; then
    echo "$dest"
    exit 0
  fi
  say "$dest has an unexpected sha256; installing it again"
fi

if ! command -v python3 >/dev/null; then
  echo "fetch_gpt2_ranks: python3 is needed (with pip) to fetch openai-whisper from PyPI" >&2
  exit 1
fi

mkdir -p "$data_dir"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/colossal-gpt2-ranks.XXXXXX")"
partial="$dest.partial.$$"
trap 'rm -rf "$tmp"; rm -f "$partial"' EXIT

say "downloading openai-whisper==$WHISPER_VERSION from PyPI for $MEMBER_SUFFIX"
# Two retries of 20 s each: without a network, pip's defaults (5 retries with
# back-off) kept a first run waiting for minutes before it failed.
if ! python3 -m pip download --quiet --retries 2 --timeout 20 --no-deps --no-binary=:none: \
    "openai-whisper==$WHISPER_VERSION" -d "$tmp" >"$tmp/pip.log" 2>&1; then
  cat "$tmp/pip.log" >&2
  echo "fetch_gpt2_ranks: pip could not download openai-whisper==$WHISPER_VERSION" >&2
  exit 1
fi

# Extract just the one member, from a wheel (zip) or an sdist (tar.gz).
python3 - "$tmp" "$MEMBER_SUFFIX" "$partial" <<'PY'
import os, sys, tarfile, zipfile
folder, suffix, out = sys.argv[1:]
archives = [os.path.join(folder, n) for n in os.listdir(folder) if n != "pip.log"]
if len(archives) != 1:
    sys.exit(f"fetch_gpt2_ranks: expected one downloaded archive in {folder}, found {archives}")
path = archives[0]
data = None
if zipfile.is_zipfile(path):
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        if len(names) == 1:
            data = z.read(names[0])
elif tarfile.is_tarfile(path):
    with tarfile.open(path) as t:
        members = [m for m in t.getmembers() if m.isfile() and m.name.endswith(suffix)]
        if len(members) == 1:
            data = t.extractfile(members[0]).read()
if data is None:
    sys.exit(f"fetch_gpt2_ranks: {os.path.basename(path)} has no single member ending in {suffix}")
with open(out, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
PY

got="$(sha256_of "$partial")"
if [[ "$got" != "$GPT2_TIKTOKEN_SHA256" ]]; then
  echo "fetch_gpt2_ranks: sha256 mismatch for $MEMBER_SUFFIX from openai-whisper==$WHISPER_VERSION:" >&2
  echo "  got      $got" >&2
  echo "  expected $GPT2_TIKTOKEN_SHA256" >&2
  exit 1
fi
mv -f "$partial" "$dest"
say "installed $dest"
echo "$dest"
