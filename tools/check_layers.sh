#!/usr/bin/env bash
# Lists every dependency that points up the layer stack (docs/architecture.md):
#
#   kernels < core < comm < io < nn < parallel < lua < recipes
#
# A target of one layer may depend on targets of its own layer and of the
# layers below it, never above. For each layer this asks Bazel for the
# targets of higher layers in the dependencies of that layer's targets (tests
# included), and prints each offending edge as "from -> to". Exits 1 if there
# is any, 0 if the arrows all point down.
#
#   tools/check_layers.sh              # the check (CI runs it)
#   tools/check_layers.sh --self-test  # plants core -> nn in a scratch package and
#                                      # expects the check to report exactly that
# (Bazel visibility, bazel/layers/BUILD, refuses such a dependency at build
# time too; this query also covers tests and data dependencies.)
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--self-test" ]]; then
  probe=core/zz_layer_probe
  if [[ -e $probe ]]; then
    echo "check_layers: $probe exists; remove it first" >&2
    exit 2
  fi
  mkdir -p "$probe"
  trap 'rm -rf "$probe"' EXIT
  printf 'cc_library(\n    name = "probe",\n    deps = ["//nn/module:parameter"],\n)\n' >"$probe/BUILD"
  out=$("$0" 2>&1)
  code=$?
  if [[ $code -eq 1 && "$out" == *"core: //$probe:probe -> //nn/module:parameter"* ]]; then
    echo "check_layers self-test: the planted core -> nn dependency was reported"
    exit 0
  fi
  echo "check_layers self-test FAILED: exit $code, output:" >&2
  echo "$out" >&2
  exit 1
fi

layers=(kernels core comm io nn parallel lua recipes)
status=0
for ((i = 0; i < ${#layers[@]} - 1; i++)); do
  layer="${layers[i]}"
  above=""
  for ((j = i + 1; j < ${#layers[@]}; j++)); do
    above+="${above:+ + }//${layers[j]}/..."
  done
  # Direct edges from this layer's targets into a higher layer.
  query="let mine = //$layer/... in rdeps(\$mine, $above, 1) intersect \$mine"
  mapfile -t sources < <(bazel query --noshow_progress "$query" 2>/dev/null)
  for src in "${sources[@]}"; do
    [[ -n "$src" ]] || continue
    mapfile -t targets < <(bazel query --noshow_progress "deps($src, 1) intersect ($above)" 2>/dev/null)
    for dst in "${targets[@]}"; do
      echo "$layer: $src -> $dst"
      status=1
    done
  done
done
if [[ $status -eq 0 ]]; then
  echo "layers: every dependency points down (${layers[*]})"
fi
exit "$status"
