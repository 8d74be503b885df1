#!/usr/bin/env bash
# Real libFuzzer runs of the io fuzz targets (clang, -fsanitize=fuzzer,address,undefined).
#
#   tests/fuzz/run_libfuzzer.sh                      # every target (3), 30 s each
#   tests/fuzz/run_libfuzzer.sh 300 safetensors      # one target, 5 minutes
#   FUZZ_OUT=/tmp/f CXX=clang++-14 tests/fuzz/run_libfuzzer.sh 60
#
# Compiles each target (io/<pkg>/<target>_fuzz.cc) with the io sources it needs
# directly with clang++ (outside Bazel: see README.md for why), copies the
# committed seeds (tests/fuzz/corpus/<target>/) into a working corpus under
# $FUZZ_OUT (default /tmp/colossal-fuzz), and runs libFuzzer for SECONDS.
# Crashes land in $FUZZ_OUT/<target>/crash-*; the script exits non-zero if
# any target crashed. Reproduce one with: $FUZZ_OUT/<target>/fuzzer CRASH_FILE.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds="${1:-30}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors token_shard sharded_index)
out="${FUZZ_OUT:-/tmp/colossal-fuzz}"
cxx="${CXX:-clang++-14}"
command -v "$cxx" >/dev/null || cxx=clang++
absl_libs=$(ls /usr/lib/x86_64-linux-gnu/libabsl_*.so | sed 's|.*/lib\(.*\)\.so|-l\1|')

sources_for() {
  case "$1" in
    safetensors) echo io/safetensors/safetensors_fuzz.cc io/safetensors/reader.cc io/safetensors/dtypes.cc \
                      io/common/file_util.cc tests/fuzz/fuzz_target.cc ;;
    token_shard) echo io/shards/token_shard_fuzz.cc io/shards/token_shard.cc io/common/file_util.cc \
                      tests/fuzz/fuzz_target.cc ;;
    sharded_index) echo io/safetensors/sharded_index_fuzz.cc io/safetensors/sharded.cc io/safetensors/reader.cc \
                        io/safetensors/writer.cc io/safetensors/dtypes.cc io/common/atomic_file.cc \
                        io/common/file_util.cc tests/fuzz/fuzz_target.cc ;;
    *) echo "unknown target '$1' (safetensors, token_shard, sharded_index)" >&2; return 1 ;;
  esac
}

failed=0
for t in "${targets[@]}"; do
  dir="$out/$t"
  mkdir -p "$dir/corpus"
  cp -n tests/fuzz/corpus/"$t"/* "$dir/corpus/"
  echo "== $t: compiling with $cxx"
  # shellcheck disable=SC2046
  "$cxx" -std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I. $(sources_for "$t") -o "$dir/fuzzer" \
    -Wl,--as-needed $absl_libs
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  echo "== $t: libFuzzer for ${seconds} s, corpus $dir/corpus"
  if ! "$dir/fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$dir/" "${dict[@]}" "$dir/corpus" 2>"$dir/log"; then
    failed=1
    echo "== $t: CRASH (log $dir/log):"
    grep -E "ERROR|contract violated|SUMMARY|Test unit written" "$dir/log" || tail -30 "$dir/log"
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb|new_units_added)|cov: " "$dir/log" | tail -4
done
exit "$failed"
