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
#   tools/check_layers.sh
set -uo pipefail
cd "$(dirname "$0")/.."

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
