#!/usr/bin/env bash
B=/tmp/gpu_bundle11; repo=$PWD
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64" COLOSSAL_DATA="$B/data" NCCL_NVLS_ENABLE=0
bin="$B/bin/lua_colossal"; port=29900
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
a2a=(--set plugin.enable_sequence_parallelism=true --set plugin.sequence_parallelism_mode=all_to_all --set plugin.sp_size=2)
prof() {
  local label=$1; shift; port=$((port + 1))
  rm -rf /tmp/nc && mkdir -p /tmp/nc && ln -s "$repo/recipes" /tmp/nc/recipes
  (cd /tmp/nc && timeout 150 "$NCU" --clock-control none --target-processes all \
    -k 'regex:forward_kernel|dkdv_kernel|dq_kernel|copy_2d_kernel|rope_pack|nccl' \
    --launch-skip 3000 --launch-count 60 --metrics gpu__time_duration.sum --csv \
    "$bin" run --nproc_per_node 2 --master_port $port bench recipes/llama_hybrid.lua \
    --steps 2 --warmup 1 --set model.preset=llama3.2-1b --set data.seq_len=2048 --set plugin.tp_size=1 \
    --set plugin.zero_stage=1 "$@" > /tmp/nc.csv 2>/tmp/nc.err)
  echo "== $label (rc $?)"
  python3 - <<'PY'
import csv, collections
rows = [r for r in csv.reader(open('/tmp/nc.csv')) if len(r) > 10]
if not rows: print(open('/tmp/nc.err').read()[-1500:]); raise SystemExit
hdr = rows[0]; k = hdr.index('Kernel Name'); v = hdr.index('Metric Value'); u = hdr.index('Metric Unit')
agg = collections.defaultdict(list)
for r in rows[1:]:
    name = r[k].split('(')[0].split('<')[0][-40:]
    val = float(r[v].replace(',', '')); unit = r[u]
    us = val / 1000 if unit == 'nsecond' else (val if unit == 'usecond' else val * 1000)
    agg[name].append(us)
for n, xs in sorted(agg.items()):
    print(f"  {n:42s} n={len(xs):3d} mean {sum(xs)/len(xs):9.1f} us  max {max(xs):9.1f}")
PY
}
prof "dp2 B4" --set data.micro_batch_size=4 --set accumulation_steps=1
prof "sp2 B8" --set data.micro_batch_size=8 --set accumulation_steps=1 "${a2a[@]}"
