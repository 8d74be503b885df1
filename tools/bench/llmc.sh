#!/usr/bin/env bash
# GPT-2 124M beside llm.c (github.com/karpathy/llm.c): its train_gpt2cu, built
# here, trained on the GPU host from a random d12 model with our batch shape
# (micro-batch 16 x 1024, bf16, fp32 master weights, no accumulation, no
# recompute). Compare with `gpt2_train_bench --benchmark_filter='bf16:1/preset:0/B:16'`
# in the same call (docs/benchmarks.md, session 19).
#
#   tools/bench/llmc.sh build LLMC_SRC CUDNN_FRONTEND OUT   # on a machine with nvcc (CUDA 13)
#   tools/bench/llmc.sh data OUT                            # token shards (needs ./colossal's binary)
#   tools/bench/llmc.sh run OUT [extra train_gpt2cu flags]  # on the GPU host
#
# build: LLMC_SRC is an llm.c checkout (measured: f1e2ace), CUDNN_FRONTEND a
# cudnn-frontend checkout (header-only; measured: v1.23). Builds OUT/bin/train_gpt2cu
# (llm.c's own attention) and OUT/bin/train_gpt2cu_cudnn (cuDNN flash attention)
# for sm_90, one GPU (no MPI, no NCCL), without NVML (-lnvidia-ml dropped: so
# never pass llm.c's -lg). CUDA 13 removed the integer-device cudaMemAdvise that
# llm.c's out-of-memory fallback calls; the build rewrites that one call.
# run: finds cuBLASLt / cuDNN / NVRTC in PyTorch's wheels, runs both binaries
# for 30 steps and prints each one's mean step time (llm.c's "total average
# iteration time": steps 2-30, host data loading included). Pass `-ge 2` to
# fuse GELU into the GEMMs (the faster setting on Hopper; llm.c's default is 0).
set -euo pipefail

cmd="${1:-}"
case "$cmd" in
  build)
    src="$(cd "$2" && pwd)" fe="$(cd "$3" && pwd)" out="$(mkdir -p "$4/bin" && cd "$4" && pwd)"
    export PATH="/usr/local/cuda/bin:$PATH"
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
      "$src/llmc/cuda_utils.cuh"
    # The Makefile looks for ./cudnn-frontend/include before it honours CUDNN_FRONTEND_PATH.
    [[ -e "$src/cudnn-frontend" ]] || ln -s "$fe" "$src/cudnn-frontend"
    common=(GPU_COMPUTE_CAPABILITY=90 NO_MULTI_GPU=1 NO_USE_MPI=1)
    make -C "$src" -j1 train_gpt2cu "${common[@]}" USE_CUDNN=0 NVCC_LDFLAGS="-lcublas -lcublasLt"
    cp "$src/train_gpt2cu" "$out/bin/train_gpt2cu"
    rm -f "$src/train_gpt2cu"  # make would keep it: the cuDNN build differs only in its flags
    make -C "$src" -j1 train_gpt2cu "${common[@]}" USE_CUDNN=1 CUDNN_FRONTEND_PATH="$fe/include" \
      NVCC_LDFLAGS="-lcublas -lcublasLt -lcudnn -lnvrtc"
    cp "$src/train_gpt2cu" "$out/bin/train_gpt2cu_cudnn"
    git -C "$src" rev-parse HEAD >"$out/VERSIONS" 2>/dev/null || true
    ;;
  data)
    out="$2"
    root="$(cd "$(dirname "$0")/../.." && pwd)"
    "$root/colossal" data prepare --input "${COLOSSAL_DATA:-$HOME/.cache/colossal/data}/corpus/shakespeare" \
      --output "$out/data/shakespeare" --name shakespeare
    ;;
  run)
    out="$(cd "$2" && pwd)"
    shift 2
    libs=$(python3 -c 'import os, nvidia, torch; print(" ".join(sorted(set(nvidia.__path__) | {os.path.join(os.path.dirname(torch.__file__), "lib")})))')
    dirs=""
    for lib in libcublasLt.so.13 libcudnn.so.9 libcudnn_graph.so.9 libnvrtc.so.13; do
      d=$(find -H $libs -name "$lib" 2>/dev/null | head -1 | xargs -r dirname)
      [[ -n "$d" ]] && dirs="$dirs:$d"
    done
    export LD_LIBRARY_PATH="${dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    cd "$out"
    # -e d12: GPT-2 124M from random weights; -b/-t/-d: 16 x 1024, no accumulation;
    # -r 0: no recompute; -w 1: fp32 master weights; -v/-m/-s/-n/-h: no eval, sample or checkpoint.
    args=(-e d12 -i 'data/shakespeare/shakespeare_train_*.bin' -j 'data/shakespeare/shakespeare_val_*.bin'
          -b 16 -t 1024 -d 16384 -x 30 -v 100000 -m 0 -s 0 -n 0 -h 0 -r 0 -z 0 -w 1 -f 1
          -k cosine -l 3e-4 -u 0 -q 1.0 -c 0.0 "$@")
    for b in train_gpt2cu_cudnn train_gpt2cu; do
      echo "== llm.c $b $*"
      ./bin/$b "${args[@]}" >"$b.log" 2>&1 || { tail -5 "$b.log"; continue; }
      grep -E "total average iteration time" "$b.log"
    done
    ;;
  *)
    echo "usage: $0 build LLMC_SRC CUDNN_FRONTEND OUT | data OUT | run OUT [flags]" >&2
    exit 2
    ;;
esac
