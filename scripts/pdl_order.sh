#!/usr/bin/env bash
# Does any kernel of a config touch global memory before griddepcontrol.wait? Every kernel a
# plan launches starts early behind the stream's previous kernel on sm_90, so none may read or
# write global memory before that wait (docs/perf/matmul.md v68: the tail split's header was
# written before it). Renders the config (the default where none is given) with the CLI,
# compiles its PTX with ptxas for sm_90a and reads the SASS: prints "EARLY ..." for each kernel
# whose first global load or store (LDG, LDGSTS, UTMALDG, STG, UTMASTG, atomics) comes before
# its ACQBULK (the wait), and nothing otherwise. Needs no GPU; cuobjdump and nvdisasm come from
# PyPI where the toolkit lacks them (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm).
#
#   scripts/pdl_order.sh OP DTYPE SHAPE ["OPTION ..."] [CONFIG]
#   scripts/pdl_order.sh matmul bf16 4015x1600x2088
#   scripts/pdl_order.sh matmul bf16 16x4096x4096 "b=col act=gelu bias=1" "variant=2,row_bytes=128"
#
# Straight-line order in the SASS stands for execution order: the wait sits in each kernel's
# prologue, before any branch to its work.
set -euo pipefail
cd "$(dirname "$0")/.."
op=$1 dtype=$2 shape=$3 options=${4:-} config=${5:-}
TILESMITH=${TILESMITH:-build/tilesmith}
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
for dir in "$site/nvidia/cu13/bin" /usr/local/cuda/bin; do [[ -d $dir ]] && PATH=$dir:$PATH; done
command -v cuobjdump >/dev/null && command -v nvdisasm >/dev/null ||
  { echo "pdl_order: cuobjdump and nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)" >&2; exit 2; }
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
args=(source --op "$op" --dtype "$dtype" --shape "$shape" --emit ptx)
for option in $options; do args+=(--option "$option"); done
[[ -n $config ]] && args+=(--config "$config")
"$TILESMITH" "${args[@]}" > "$work/k.ptx"
ptxas -arch=sm_90a "$work/k.ptx" -o "$work/k.cubin"
cuobjdump -sass "$work/k.cubin" | awk -v what="$op $dtype $shape $options $config" '
  /Function :/ { kernel = $3; waited = 0; reported = 0; next }
  /ACQBULK/ { waited = 1 }
  /(LDG|LDGSTS|UTMALDG|STG|UTMASTG|ATOMG|REDG|LD\.E|ST\.E)/ {
    if (!waited && !reported) { reported = 1; print "EARLY " what ": " kernel ": " $0 }
  }'
