#!/usr/bin/env bash
# The sm_90a matmul probe (bench/matmul_sm90_probe.cu).
#   bash scripts/matmul_sm90_probe.sh build        here: nvcc into build-probe/, ptxas report and
#                                                  SASS summary beside it (no GPU needed)
#   bash scripts/matmul_sm90_probe.sh run [args]   on the GPU machine (carry build-probe):
#                                                  checks, times, logs under $OUT (default
#                                                  build-probe/out); args go to the probe
#                                                  (--check-only, --reps N, --only I ...)
set -euo pipefail
cd "$(dirname "$0")/.."
CUDA=${CUDA:-/usr/local/cuda}
mode=${1:-build}
shift || true
case "$mode" in
  build)
    mkdir -p build-probe
    "$CUDA/bin/nvcc" -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates \
      -Xptxas -v bench/matmul_sm90_probe.cu -o build-probe/matmul_sm90_probe \
      -L"$CUDA/lib64" -L"$CUDA/lib64/stubs" -lcublas -lcuda -Xlinker -rpath="$CUDA/lib64" \
      2> build-probe/ptxas.log || { cat build-probe/ptxas.log; exit 1; }
    # The same probe with each stage handed back as soon as its own wgmma group is done.
    "$CUDA/bin/nvcc" -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates \
      -DTS_SM90_MMA_IN_FLIGHT=0 bench/matmul_sm90_probe.cu -o build-probe/matmul_sm90_probe_w0 \
      -L"$CUDA/lib64" -L"$CUDA/lib64/stubs" -lcublas -lcuda -Xlinker -rpath="$CUDA/lib64"
    grep -iE "warning|error" build-probe/ptxas.log || true
    grep -E "Compiling entry|Used|spill" build-probe/ptxas.log | grep -B2 "matmul_sm90" | grep -E "Used|spill" \
      | paste - - | sort | uniq -c || true
    if command -v cuobjdump > /dev/null; then
      cuobjdump -sass build-probe/matmul_sm90_probe > build-probe/probe.sass
      echo "HGMMA: $(grep -c HGMMA build-probe/probe.sass)  LDL/STL: $(grep -cE '\b(LDL|STL)\b' build-probe/probe.sass || true)"
    fi
    ;;
  run)
    OUT=${OUT:-build-probe/out}
    mkdir -p "$OUT"
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv \
      > "$OUT/gpu.txt" 2>&1 || true
    set -o pipefail
    bin=./build-probe/matmul_sm90_probe
    if [ "${PROBE_W0:-0}" = 1 ]; then bin=./build-probe/matmul_sm90_probe_w0; fi
    "$bin" "$@" 2>&1 | tee "$OUT/probe${PROBE_W0:+_w$PROBE_W0}.log"
    ;;
  *)
    echo "usage: $0 build|run [probe args]" >&2
    exit 2
    ;;
esac
