#!/bin/bash
# comm_bench --spawn 2 over the builtin backend: the table's columns are
# nccl-tests', every size is checked ("#wrong" 0), bad flags fail clearly.
set -u
BENCH="$1"
fail() { echo "FAIL: $*"; exit 1; }

run() {  # run <name> <args...>: output in $OUT
  local name="$1"; shift
  OUT="$(timeout 20 "$BENCH" --spawn 2 "$@" 2>&1)"
  local rc=$?
  echo "=== $name: comm_bench --spawn 2 $*"
  echo "$OUT"
  [ $rc -eq 0 ] || fail "$name exited with $rc"
}

check_table() {  # check_table <rows expected>
  echo "$OUT" | grep -Eq '^# +size +count +type +redop +root +time +algbw +busbw +#wrong' \
    || fail "no nccl-tests header"
  echo "$OUT" | grep -Eq '^# +\(B\) +\(elements\) .*\(us\) +\(GB/s\) +\(GB/s\)' \
    || fail "no units line"
  local rows
  rows=$(echo "$OUT" | grep -Ec '^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+ +-?[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$')
  [ "$rows" -eq "$1" ] || fail "expected $1 rows with #wrong 0, got $rows"
  echo "$OUT" | grep -Eq '^# Out of bounds values : 0 OK' || fail "no '# Out of bounds values : 0 OK'"
  echo "$OUT" | grep -Eq '^# Avg bus bandwidth +: [0-9.e+-]+$' || fail "no '# Avg bus bandwidth'"
}

# 1K, 4K, 16K, 64K, 256K.
SIZES=(--min_bytes 1K --max_bytes 256K --factor 4 --iters 5 --warmup 1)
run all_reduce_shm --backend builtin --transport shm --op all_reduce "${SIZES[@]}"
check_table 5
for op in reduce_scatter all_gather all_to_all broadcast; do
  run "${op}_shm" --backend builtin --transport shm --op "$op" "${SIZES[@]}"
  check_table 5
done
run all_reduce_tcp_bf16 --transport tcp --op all_reduce --dtype bfloat16 "${SIZES[@]}"
check_table 5
# nccl-tests' short flags; sizes not a multiple of 2 x 8 bytes (rounded down: 16, 64, 208 B).
run short_flags -b 24 -e 300 -f 3 -n 2 -w 0 --dtype int64 --op all_gather
check_table 3

# Bad flags: exit 2 with the reason.
out="$("$BENCH" --op all_sum 2>&1)"; rc=$?
[ $rc -eq 2 ] || fail "--op all_sum exited $rc"
echo "$out" | grep -q "all_sum" || fail "no reason for a bad --op: $out"
echo "PASS"
