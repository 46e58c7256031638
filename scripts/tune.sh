#!/usr/bin/env bash
# Builds tilesmith, then tunes matmul bf16 4096x4096x4096 on the local GPU and shows the winner.
# Without a GPU the sweep renders and NVRTC-compiles the pruned space and says timing needs one.
# Extra arguments go to `tilesmith tune`:
#
#   scripts/tune.sh
#   scripts/tune.sh --budget 60s --strategy random
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
problem=(--op matmul --dtype bf16 --shape 4096x4096x4096)

BUILD_DIR=$BUILD_DIR scripts/setup.sh
tilesmith=$BUILD_DIR/tilesmith
"$tilesmith" devices
"$tilesmith" tune "${problem[@]}" "$@"
# Without a GPU nothing was timed, so there is no winner to show.
if [[ $("$tilesmith" devices --count) -gt 0 ]]; then
  "$tilesmith" show "${problem[@]}"
fi
