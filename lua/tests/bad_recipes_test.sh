#!/usr/bin/env bash
# Issue #8: every malformed recipe in lua/testdata/bad/ makes `colossal <recipe>`
# exit with code 2 and print the recipe's file name, the line of the offending
# key ("file:LINE:") and the expected message.
#
# What each recipe must produce is written at its top (see lua/testdata/bad/BUILD):
#   -- expect: line 7: unknown key        "file:7:" and "unknown key" on stderr
#   -- expect: line 7,8: n_head           "file:7:" or "file:8:" (either key is right)
#   -- expect: line none: must return     "file: " (no line) and the fragment
#   -- args: --set steps=two              arguments after the recipe
#   -- launcher: run --nproc_per_node 2   a subcommand in front of the recipe (PORT
#                                         becomes a random port number)
#   -- code: 1                            another exit code (2 when absent)
#   -- known_bug: why                     fails today: reported as XFAIL (and as
#                                         a failure once it passes: rename the
#                                         line "-- fixed_bug:", keeping it)
#
# Hermetic: runs in $TEST_TMPDIR with COLOSSAL_DATA there, a byte-level
# tokenizer fixture (as tests/cli/cli_test.sh does; no GPT-2 ranks needed) and a
# small text corpus at lua/testdata/corpus (written here: //lua's files are
# private to it), prepared once into data/data (what `data = { input = ... }`
# writes by default).
set -uo pipefail
# The CPU, also on a machine with a GPU (the expectations are the CPU's).
export CUDA_VISIBLE_DEVICES=""

root="$PWD"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
work="$tmp/work"
mkdir -p "$work" "$tmp/cdata"
cd "$work" || exit 1
# Recipes are run as lua/testdata/bad/x.lua, as a user would.
mkdir -p lua/testdata/corpus
ln -sfn "$root/lua/colossal" lua/colossal
ln -sfn "$root/lua/testdata/bad" lua/testdata/bad
for d in 1 2 3 4 5 6 7 8; do
  printf 'Document %d of the test corpus says hello to the world.\nIts second line, %d.\n' "$d" "$d" \
    >"lua/testdata/corpus/doc$d.txt"
done
bin="lua/colossal"
export COLOSSAL_DATA="$tmp/cdata"

# A byte-level tokenizer fixture (the 256 single-byte tokens, ranks 0..255).
tok="$COLOSSAL_DATA/gpt2.tiktoken"
: >"$tok"
for i in $(seq 0 255); do
  printf "%s %d\n" "$(printf "\\$(printf %03o "$i")" | base64)" "$i" >>"$tok"
done
if ! "$bin" data prepare --input lua/testdata/corpus --output data/data --name data \
  --tokenizer "$tok" >"$tmp/prepare.out" 2>&1; then
  echo "FAIL: colossal data prepare of lua/testdata/corpus:"
  cat "$tmp/prepare.out"
  exit 1
fi

# field FILE NAME: the text after "-- NAME: " in FILE's leading comment lines.
field() {
  awk -v key="-- $2: " '!/^--/ { exit } index($0, key) == 1 { print substr($0, length(key) + 1); exit }' "$1"
}

# check RECIPE LINE FRAGMENT CODE GOT_CODE ERRFILE: prints what is wrong, if anything.
check() {
  local recipe="$1" line="$2" fragment="$3" code="$4" got="$5" err="$6"
  if [[ "$got" != "$code" ]]; then
    echo "exit code $got, want $code"
  fi
  if [[ "$line" == none ]]; then
    grep -qF -- "$recipe: " "$err" || echo "stderr does not name $recipe"
  elif ! [[ "$line" =~ ^[0-9]+(,[0-9]+)*$ ]]; then
    echo "bad expect line '$line' in the recipe"
  else
    local l found=""
    for l in ${line//,/ }; do
      grep -qF -- "$recipe:$l:" "$err" && found=1
    done
    [[ -n "$found" ]] || echo "stderr has no '$recipe:$line:'"
  fi
  grep -qF -- "$fragment" "$err" || echo "stderr has no '$fragment'"
}

failures=0
passed=0
with_line=0
xfail=0
total=0
shopt -s nullglob
recipes=(lua/testdata/bad/*.lua)
for recipe in "${recipes[@]}"; do
  total=$((total + 1))
  expect="$(field "$recipe" expect)"
  if ! [[ "$expect" =~ ^line\ ([^:]+):\ (.+)$ ]]; then
    echo "FAIL: $recipe: no '-- expect: line N: message' first line"
    failures=$((failures + 1))
    continue
  fi
  line="${BASH_REMATCH[1]}"
  fragment="${BASH_REMATCH[2]}"
  code="$(field "$recipe" code)"
  code="${code:-2}"
  known_bug="$(field "$recipe" known_bug)"
  read -r -a args <<<"$(field "$recipe" args)"
  # PORT: a free-ish port of this run's own (other jobs on the machine use theirs).
  read -r -a launcher <<<"$(field "$recipe" launcher | sed "s/PORT/$((20000 + RANDOM % 12000))/g")"
  err="$tmp/$(basename "$recipe" .lua).err"
  timeout 120 "$bin" "${launcher[@]}" "$recipe" "${args[@]}" >"$tmp/out" 2>"$err"
  got=$?
  problems="$(check "$recipe" "$line" "$fragment" "$code" "$got" "$err")"
  if [[ -n "$known_bug" ]]; then
    if [[ -n "$problems" ]]; then
      echo "XFAIL: $recipe (known bug: $known_bug)"
      xfail=$((xfail + 1))
    else
      echo "FAIL: $recipe passes now: turn its '-- known_bug:' line into '-- fixed_bug:'" \
        "(keep the line: the expected line numbers count it)"
      failures=$((failures + 1))
    fi
    continue
  fi
  if [[ -n "$problems" ]]; then
    echo "FAIL: $recipe (expected: line $line: $fragment; exit $code)"
    sed 's/^/  /' <<<"$problems"
    echo "  --- stderr"
    sed 's/^/  /' "$err"
    failures=$((failures + 1))
  else
    passed=$((passed + 1))
    [[ "$line" != none ]] && with_line=$((with_line + 1))
  fi
done

# The acceptance of issue #8: at least 20 mistakes reported with file:line.
if ((total < 22)); then
  echo "FAIL: only $total recipes in lua/testdata/bad (want >= 22)"
  failures=$((failures + 1))
fi
if ((with_line < 20)); then
  echo "FAIL: only $with_line recipes reported with file:line and exit code 2 (want >= 20)"
  failures=$((failures + 1))
fi

# The checker itself must fail on a wrong line, a wrong message and a wrong code.
self="lua/testdata/bad/unknown_top_key.lua"
"$bin" "$self" >/dev/null 2>"$tmp/self.err"
self_code=$?
[[ -z "$(check "$self" 6 "unknown key" 2 "$self_code" "$tmp/self.err")" ]] ||
  { echo "FAIL: self-check: $self does not give what it expects"; failures=$((failures + 1)); }
for wrong in "7|unknown key|2" "6|no such message|2" "6|unknown key|1" "none|unknown key|1"; do
  IFS='|' read -r l m c <<<"$wrong"
  [[ -n "$(check "$self" "$l" "$m" "$c" "$self_code" "$tmp/self.err")" ]] ||
    { echo "FAIL: self-check: the checker accepts line $l, '$m', code $c"; failures=$((failures + 1)); }
done

echo "$total recipes: $passed passed ($with_line with file:line), $xfail known bugs (XFAIL), $failures failure(s)"
((failures == 0)) || exit 1
echo "all passed"
