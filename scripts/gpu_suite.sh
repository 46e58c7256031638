#!/usr/bin/env bash
# The GPU machine's run, through the device tool: the GPU test suite, tuning sweeps for the
# benchmark shapes, then the benchmark beside cuBLAS (torch) in the same run. Full logs and the
# database go to $OUT; a short table is printed last.
#
#   scripts/gpu_suite.sh                  # everything
#   SUITE_STEPS="tests" scripts/gpu_suite.sh
#   SUITE_STEPS="tune bench" TUNE_4096=200 scripts/gpu_suite.sh
#   SUITE_STEPS="tests suite" SUITE_ARGS="--part 1/3 --tune-budget 15s" scripts/gpu_suite.sh
#   SUITE_STEPS="rows" ROWS_ARGS="--dtypes f32 --fused=" scripts/gpu_suite.sh
#   SUITE_STEPS="shapes" SHAPES_ARGS="--count 60 --seed 16" scripts/gpu_suite.sh
#   SUITE_STEPS="shapes winners" WINNERS_ARGS="--worst 8 --dtype bf16" scripts/gpu_suite.sh
#   TEST_FILTER='GpuRow*' SUITE_STEPS=tests scripts/gpu_suite.sh
#   SUITE_STEPS="attention" ATTENTION_ARGS="--cases b4h16s4096d128 --tune-budget 20s" scripts/gpu_suite.sh
#   SUITE_STEPS="attention_backward" ATTENTION_BACKWARD_ARGS="--cases b4h16s4096d128" scripts/gpu_suite.sh
#   SUITE_STEPS="tuner replay" scripts/gpu_suite.sh     # the tuner's speed and its strategies
#   SUITE_STEPS="shards" scripts/gpu_suite.sh           # shard databases merged = the unsharded sweep
#   SUITE_STEPS="python" scripts/gpu_suite.sh           # the Python package's ops on torch tensors
#
# Build here (scripts/setup.sh) and carry the build folder: the GPU machine has no Boost or
# sqlite3.h, and the binaries link both statically.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$(mktemp -d)}
BUILD=${BUILD_DIR:-build}
STEPS=${SUITE_STEPS:-"tests python tune sass bench suite shapes rows attention attention_backward tuner replay shards"}
TEST_FILTER=${TEST_FILTER:-'Gpu*'}
# The row ops beside torch eager and torch.compile (bench/reductions_bench.py).
ROWS_ARGS=${ROWS_ARGS:-"--tune-budget 6s"}
# Attention beside SDPA's FlashAttention-2 and cuDNN backends (bench/attention_bench.py).
ATTENTION_ARGS=${ATTENTION_ARGS:-"--tune-budget 8s"}
# The same, forward and backward together (--backward): both ops tuned per case.
ATTENTION_BACKWARD_ARGS=${ATTENTION_BACKWARD_ARGS:-"--tune-budget 8s"}
# The 27-case suite beside cuBLAS and Inductor (bench/matmul_suite.py): about 40 s a case with
# tuning and Inductor's compile, so split it over runs with --part i/N and merge the JSON files.
SUITE_ARGS=${SUITE_ARGS:-"--tune-budget 15s --deadline 500"}
# The untuned default over random shapes beside cuBLAS (bench/matmul_shapes.py; ~1 s a shape).
SHAPES_ARGS=${SHAPES_ARGS:-"--count 44 --seed 15"}
# The shapes step's worst rows tuned briefly, each winner timed beside the default
# (bench/winners_vs_default.py; ~15-20 s a shape).
WINNERS_ARGS=${WINNERS_ARGS:-"--worst 6 --budget 10s"}
export TILESMITH_DB=${TILESMITH_DB:-$OUT/tilesmith.db}
export PYTHONUNBUFFERED=1
# Budgets per tuned shape ("N" candidates or "Ns" seconds; "all" = exhaustive). A budgeted
# sweep samples the space in random order: exhaustive order would spend it on one corner.
TUNE_4096=${TUNE_4096:-150s}
TUNE_8192=${TUNE_8192:-120s}
TUNE_4093=${TUNE_4093:-60s}
TUNE_DECODE=${TUNE_DECODE:-45s}
summary=()
has_step() { [[ " $STEPS " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
"$BUILD/tilesmith" devices | tee "$OUT/devices.txt"

if has_step tests; then
  echo "== GPU tests"
  "$BUILD/tests/tilesmith_tests" --gtest_filter="$TEST_FILTER" 2>&1 | tee "$OUT/gpu_tests.log" | grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|Failure|error' 
  summary+=("gpu tests: $(grep -E '^\[  PASSED  \]' "$OUT/gpu_tests.log" | sed 's/\[  PASSED  \] //') passed; failed: $(grep -cE '^\[  FAILED  \] [A-Za-z]' "$OUT/gpu_tests.log")")
  echo "== CPU tests"
  "$BUILD/tests/tilesmith_tests" --gtest_filter='-Gpu*' > "$OUT/all_tests.log" 2>&1
  summary+=("cpu tests: $(grep -E '^\[  PASSED  \]' "$OUT/all_tests.log" | sed 's/\[  PASSED  \] //') passed; $(grep -E '^\[  SKIPPED \] [0-9]' "$OUT/all_tests.log" | sed 's/\[  SKIPPED \] //') skipped; failed: $(grep -cE '^\[  FAILED  \] [A-Za-z]' "$OUT/all_tests.log")")
fi

tune() {  # shape budget
  local budget=()
  [[ "$2" != all ]] && budget=(--budget "$2" --strategy random)
  echo "== tune $1 (${2})"
  "$BUILD/tilesmith" tune --op matmul --dtype bf16 --shape "$1" "${budget[@]}" 2>&1 | tee -a "$OUT/tune.log" | grep -vE '^\[ *[0-9]+/' | tail -12
}
if has_step python; then
  echo "== Python package (tests/python/ops_gpu_test.py on the staged build/python)"
  PYTHONPATH="$BUILD/python" TILESMITH_LIB= TILESMITH_CLI= python3 tests/python/ops_gpu_test.py \
    > "$OUT/python.log" 2>&1
  summary+=("python package: exit status $?, $(tail -n 1 "$OUT/python.log")")
  echo "== host overhead of a warm call (bench/dispatch_overhead.cpp, bench/python_overhead.py)"
  "$BUILD/dispatch_overhead" "$OUT/dispatch_overhead.db" 2>&1 | tee "$OUT/overhead.txt"
  PYTHONPATH="$BUILD/python" TILESMITH_LIB= TILESMITH_CLI= python3 bench/python_overhead.py 2>&1 \
    | tee -a "$OUT/overhead.txt"
  summary+=("$(grep -E "the runtime's own" "$OUT/overhead.txt" | head -2 | tr '\n' ' ')")
  summary+=("python, tiny matmul: $(tail -n 1 "$OUT/overhead.txt")")
fi

if has_step tune; then
  tune 4096x4096x4096 "$TUNE_4096"
  tune 8192x8192x8192 "$TUNE_8192"
  tune 4093x4093x4093 "$TUNE_4093"
  tune 16x4096x4096 "$TUNE_DECODE"
  "$BUILD/tilesmith" show --op matmul --dtype bf16 --shape 4096x4096x4096 --top 10 | tee "$OUT/show_4096.txt"
  "$BUILD/tilesmith" export --format json --out "$OUT/winners.json"
  "$BUILD/tilesmith" export --format csv | tee "$OUT/winners.csv"
  "$BUILD/tilesmith" list | tee "$OUT/list.txt"
fi

# The wgmma template's SASS: HGMMA and TMA (UTMALDG/UTMASTG) present, no local-memory spills.
if has_step sass; then
  echo "== SASS of the 4096^3 winner (and of every wgmma cubin in the database)"
  python3 - "$TILESMITH_DB" "$(mktemp -d)" <<'PY' > "$OUT/sass_summary.txt" 2>&1
import sqlite3, subprocess, sys
db, out = sys.argv[1], sys.argv[2]  # cubins go to a scratch folder: $OUT returns 8 files at most
rows = sqlite3.connect(db).execute(
    "SELECT source_hash, lowered_name, cubin FROM cubins WHERE lowered_name LIKE '%matmul_sm90%'").fetchall()
counts = {"HGMMA": 0, "UTMALDG": 0, "UTMASTG": 0, "LDL": 0, "STL": 0}
with_hgmma = 0
for source_hash, name, cubin in rows:
    path = f"{out}/{source_hash}.cubin"
    open(path, "wb").write(cubin)
    sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    for op in counts:
        counts[op] += sass.count(op + ".") + sass.count(op + " ")
    with_hgmma += "HGMMA" in sass
print(f"wgmma cubins: {len(rows)}, with HGMMA: {with_hgmma}; instruction counts over all: {counts}")
PY
  cat "$OUT/sass_summary.txt"
  summary+=("sass: $(cat "$OUT/sass_summary.txt" | tail -1)")
fi

if has_step bench; then
  echo "== bench (tilesmith runtime vs cuBLAS via torch.matmul, same process)"
  python3 bench/matmul_bench.py --lib "$BUILD/libtilesmith.so" --db "$TILESMITH_DB" \
    --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
  summary+=("bench exit status: $?")
fi

if has_step suite; then
  echo "== suite (tilesmith vs cuBLAS vs Inductor max-autotune, same process)"
  # shellcheck disable=SC2086
  python3 bench/matmul_suite.py --lib "$BUILD/libtilesmith.so" --db "$TILESMITH_DB" $SUITE_ARGS \
    --json "$OUT/suite.json" --tune-log "$OUT/suite_tune.log" > "$OUT/suite.log" 2>&1
  summary+=("suite exit status: $?")
fi

if has_step shapes; then
  echo "== shapes (the untuned default over random shapes vs cuBLAS, same process)"
  # shellcheck disable=SC2086
  python3 bench/matmul_shapes.py --lib "$BUILD/libtilesmith.so" $SHAPES_ARGS \
    --json "$OUT/shapes.json" > "$OUT/shapes.log" 2>&1
  summary+=("shapes exit status: $?, $(tail -n 1 "$OUT/shapes.log" | cut -c1-160)")
fi

if has_step winners; then
  # The shapes step's worst rows, each tuned briefly: whether the space holds a faster kernel
  # than the default there, and which (bench/winners_vs_default.py; run after "shapes").
  echo "== winners (a short tune of the shapes step's worst rows, beside the default)"
  if [[ -f "$OUT/shapes.json" ]]; then
    # shellcheck disable=SC2086
    python3 bench/winners_vs_default.py --from-json "$OUT/shapes.json" --tilesmith "$BUILD/tilesmith" \
      $WINNERS_ARGS > "$OUT/winners.log" 2>&1
    summary+=("winners exit status: $?, $(tail -n 1 "$OUT/winners.log" | cut -c1-160)")
  else
    summary+=("winners: skipped (no shapes.json: run the shapes step first)")
  fi
fi

if has_step rows; then
  echo "== rows (tilesmith vs torch eager vs torch.compile, same process)"
  # shellcheck disable=SC2086
  python3 bench/reductions_bench.py --lib "$BUILD/libtilesmith.so" --tilesmith "$BUILD/tilesmith" \
    --db "$TILESMITH_DB" $ROWS_ARGS --json "$OUT/rows.json" --tune-log "$OUT/rows_tune.log" \
    > "$OUT/rows.log" 2>&1
  summary+=("rows exit status: $?")
fi

if has_step attention; then
  echo "== attention (tilesmith vs SDPA FlashAttention-2 vs SDPA cuDNN, same process)"
  # shellcheck disable=SC2086
  python3 bench/attention_bench.py --lib "$BUILD/libtilesmith.so" --tilesmith "$BUILD/tilesmith" \
    --db "$TILESMITH_DB" $ATTENTION_ARGS --json "$OUT/attention.json" \
    --tune-log "$OUT/attention_tune.log" > "$OUT/attention.log" 2>&1
  summary+=("attention exit status: $?")
fi

if has_step attention_backward; then
  echo "== attention forward+backward (tilesmith vs SDPA FlashAttention-2 vs SDPA cuDNN, same process)"
  # shellcheck disable=SC2086
  python3 bench/attention_bench.py --backward --lib "$BUILD/libtilesmith.so" \
    --tilesmith "$BUILD/tilesmith" --db "$TILESMITH_DB" $ATTENTION_BACKWARD_ARGS \
    --json "$OUT/attention_backward.json" --tune-log "$OUT/attention_backward_tune.log" \
    > "$OUT/attention_backward.log" 2>&1
  summary+=("attention_backward exit status: $?")
fi

# The tuner itself (issue 15): a cold random sweep of 200 configs at 4096^3 on a fresh database,
# timed end to end, with the sweep's own account of where the time went.
if has_step tuner; then
  echo "== tuner: 200 random configs at 4096^3, cold"
  tuner_db="$OUT/tuner_cold.db"
  rm -f "$tuner_db"
  start=$(date +%s%N)
  "$BUILD/tilesmith" tune --op matmul --dtype bf16 --shape 4096x4096x4096 --strategy random \
    --budget 200 --db "$tuner_db" > "$OUT/tuner.log" 2>&1
  status=$?
  stop=$(date +%s%N)
  summary+=("tuner: exit status $status, $(( (stop - start) / 1000000 )) ms end to end;$(grep -E '^  time ' "$OUT/tuner.log" | sed 's/^  time//')")
  rm -f "$tuner_db"
fi

# A sweep split into two shards and merged equals the unsharded sweep (docs/distributed.md):
# the same configs with the same outcomes, and the winner (scripts/compare_databases.py). With
# two or more GPUs the shards run at once, one per GPU, as array tasks on two hosts would; with
# one, in turn.
SHARD_SPACE=${SHARD_SPACE:-"--op matmul --dtype bf16 --shape 2048x2048x2048 --only variant=1,block_m=128,block_n=128"}
if has_step shards; then
  echo "== shards: two shard databases merged, against the unsharded sweep"
  rm -f "$OUT"/shard-[01].db "$OUT/unsharded.db" "$OUT/merged.db"
  # shellcheck disable=SC2086
  "$BUILD/tilesmith" tune $SHARD_SPACE --db "$OUT/unsharded.db" > "$OUT/shards.log" 2>&1
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  for i in 0 1; do
    # shellcheck disable=SC2086
    "$BUILD/tilesmith" tune $SHARD_SPACE --shard "$i/2" --device $(( i % gpus )) \
      --db "$OUT/shard-$i.db" > "$OUT/shard-$i.log" 2>&1 &
    [[ $gpus -lt 2 ]] && wait
  done
  wait
  "$BUILD/tilesmith" merge "$OUT/shard-0.db" "$OUT/shard-1.db" --into "$OUT/merged.db" >> "$OUT/shards.log" 2>&1
  python3 scripts/compare_databases.py "$OUT/merged.db" "$OUT/unsharded.db" > "$OUT/shards_compare.txt" 2>&1
  summary+=("shards: merged vs unsharded, exit status $? ($(tail -n 1 "$OUT/shards_compare.txt"))")
fi

# The search strategies replayed on exhaustive sweeps of the sm_90a template's space at three
# shapes (build/strategy_replay: proposals to reach 2% of the best, per strategy).
if has_step replay; then
  echo "== strategies: exhaustive sweeps of three shapes per op, then the replay"
  replay_db="$OUT/replay.db"
  for shape in 2048x2048x2048 4096x4096x4096 4096x14336x4096; do
    "$BUILD/tilesmith" tune --op matmul --dtype bf16 --shape "$shape" --only variant=1 \
      --db "$replay_db" >> "$OUT/replay_tune.log" 2>&1
  done
  # Attention's forward, its sm_90a template (the space the tuner races there).
  for shape in 4x16x4096x128 8x32x2048x128 2x16x8192x128; do
    "$BUILD/tilesmith" tune --op attention --dtype bf16 --shape "$shape" --only variant=1 \
      --db "$replay_db" >> "$OUT/replay_tune.log" 2>&1
  done
  grep -E '^  (time|compiled) ' "$OUT/replay_tune.log"
  "$BUILD/strategy_replay" --db "$replay_db" > "$OUT/replay.log" 2>&1
  summary+=("replay exit status: $?")
fi

echo
echo "================ summary ================"
for line in "${summary[@]}"; do echo "$line"; done
if has_step tune; then echo; cat "$OUT/list.txt"; fi
if has_step bench; then echo; tail -n 25 "$OUT/bench.log"; fi
if has_step suite; then echo; sed -n '/^\(not run: \|layout: storage\)/,$p' "$OUT/suite.log"; fi
if has_step rows; then echo; sed -n '/^GB\/s:/,$p' "$OUT/rows.log"; tail -n 3 "$OUT/rows.log"; fi
if has_step attention; then echo; sed -n '/^TFLOP\/s:/,$p' "$OUT/attention.log"; fi
if has_step attention_backward; then echo; sed -n '/^TFLOP\/s:/,$p' "$OUT/attention_backward.log"; fi
if has_step replay; then echo; cat "$OUT/replay.log"; fi
if has_step shards; then echo; cat "$OUT/shards_compare.txt"; fi
if has_step python; then echo; grep -E '^FAIL' "$OUT/python.log"; cat "$OUT/overhead.txt"; fi
