#!/usr/bin/env python3
"""The untuned default over random shapes, beside cuBLAS (torch.matmul), in rounds.

usage: matmul_shapes.py [--count DRAWS] [--seed S] [--narrow-n | --few-columns | --within RANGES |
                        --shapes [Bx]MxNxK:LAYOUT,...] [--lib PATH] [--baseline PATH] [--json FILE]
                        [--config LABEL=CONFIG ...] [--tilesmith PATH] [--graph]

Every shape nobody tuned runs the family's default config, so the default is what a user
meets first. The suite (matmul_suite.py) times 27 shapes from peers' benchmarks; this draws
shapes no list names: M log-uniform in 1..8192 (a fifth of them 1, 2, 7, 16 or 33), N and K
log-uniform in 64..16384 (with --narrow-n, N in 1..64: routers, low-rank adapters, heads of a
few classes), each half the time rounded up to a multiple of 8 (else left as drawn, usually
unaligned rows), each of the layouts rr, rc (x @ W^T, twice as often), cr (with --few-columns,
many rows of A times 1-4 columns of B: draw_few_columns; with --within, M, N and K
log-uniform in the ranges given, e.g. 1024-8192x65-128x4096-16384: a rule's domain). The
runtime's database is empty, so each call takes the default. Each shape is verified first
(NaN-poisoned output, relative Frobenius error against an fp32 reference), then timed in
rounds beside cuBLAS (bench/matmul_bench.py make_rounds: both after their own L2 flush, at the
same clocks). Prints a row a shape, the geometric mean x cuBLAS and the worst shapes. With
--baseline, a second build's library (another commit's build/libtilesmith.so) runs the same
shapes behind its own empty database, verified and timed in the same rounds: an A/B of a change
to the default, each side against the same cuBLAS timings. --shapes names shapes instead of
drawing them (layout rr, rc or cr: A then B, r row-major, c column-major; a fourth leading
dimension, BxMxNxK, is a batch of B packed products, cuBLAS's strided batched).
--config LABEL=CONFIG (repeatable) also times given configs (k=v,...: one config, or a slice
whose tuned winner runs) in the same rounds, each from its own database that one `tilesmith
tune --only CONFIG` of the shape fills (verified there, and here again); a config the shape's
constraints reject is reported and skipped. --graph times every side a second way, as a serving
loop runs small products: CUDA graphs of calls over rotating input sets, each call's operands
cold in L2, nothing flushed between calls (matmul_bench.make_graph_rounds, as the suite's M <= 16
table), every set's output of every side verified afterwards. Exit status: 0 all verified, 1 a
verification failure, 2 setup problem.
"""
import argparse, ctypes, json, math, os, random, subprocess, sys, tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import matmul_bench as mb  # noqa: E402

mb.PROG = "matmul_shapes"


def draw_shapes(count, seed, narrow_n=False, within=None):
    """`count` shapes (m, n, k, layout) from `seed`; the same seed gives the same shapes, so a
    change is measured on the shapes it was measured on before. `narrow_n`: N in 1..64.
    `within`: ((m_lo, m_hi), (n_lo, n_hi), (k_lo, k_hi)), each dimension log-uniform in its
    range (a rule's domain, where most draws test the rule: parse_within)."""
    rng = random.Random(seed)

    def log_uniform(lo, hi):
        return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))

    def round_up(value, hi):  # to a multiple of 8 where that stays in range
        rounded = (value + 7) // 8 * 8
        return rounded if rounded <= hi else value

    shapes = []
    for _ in range(count):
        if within:
            (m_lo, m_hi), (n_lo, n_hi), (k_lo, k_hi) = within
            m, n, k = log_uniform(m_lo, m_hi), log_uniform(n_lo, n_hi), log_uniform(k_lo, k_hi)
        else:
            m = log_uniform(1, 8192) if rng.random() < 0.8 else rng.choice([1, 2, 7, 16, 33])
            n_hi, k_hi = (64 if narrow_n else 16384), 16384
            n, k = log_uniform(1 if narrow_n else 64, n_hi), log_uniform(64, k_hi)
        if rng.random() < 0.5:
            n = round_up(n, n_hi)
        if rng.random() < 0.5:
            k = round_up(k, k_hi)
        if m * n * k > 2.2e11:  # a draw past a few ms is dropped
            continue
        shapes.append((m, n, k, rng.choice(["rr", "rc", "rc", "cr"])))
    return shapes


def parse_within(text):
    """'M_LO-M_HIxN_LO-N_HIxK_LO-K_HI' (a single value for a fixed dimension) as draw_shapes'
    `within`, or a setup error."""
    ranges = []
    for part in text.lower().split("x"):
        lo, _, hi = part.partition("-")
        try:
            lo, hi = int(lo), int(hi or lo)
        except ValueError:
            lo = hi = 0
        if lo < 1 or hi < lo:
            mb.setup_error(f"--within {text!r}: want M_LO-M_HIxN_LO-N_HIxK_LO-K_HI, 1 <= LO <= HI")
        ranges.append((lo, hi))
    if len(ranges) != 3:
        mb.setup_error(f"--within {text!r}: want three ranges, M x N x K")
    return tuple(ranges)


def draw_few_columns(count, seed):
    """`count` products of many rows of A and a few columns of B (m, n, k, layout): a matrix
    times a vector (rr, one column), x @ W^T of 1-4 columns (rc, a value head), a column-major
    A times 1-2 columns (cr, cc), and one column-major row of A times x @ W^T's weight (cc,
    M = 1). M (or N for the last) log-uniform in 528..32768, K in 32..16384, half the K
    rounded up to a multiple of 8; past 4e8 elements of A (or B) a draw is dropped."""
    rng = random.Random(seed)

    def log_uniform(lo, hi):
        return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))

    shapes = []
    kinds = ["rc"] * 3 + ["rr"] * 3 + ["cr"] * 2 + ["cc", "row"]
    while len(shapes) < count:
        kind = rng.choice(kinds)
        m, k = log_uniform(528, 32768), log_uniform(32, 16384)
        if rng.random() < 0.5:
            k = (k + 7) // 8 * 8
        if m * k > 4e8:
            continue
        if kind == "row":
            shapes.append((1, m, k, "cc"))
        elif kind == "rc":
            shapes.append((m, rng.choice([1, 2, 3, 4]), k, "rc"))
        elif kind == "rr":
            shapes.append((m, 1, k, "rr"))
        else:
            shapes.append((m, rng.choice([1, 1, 2]), k, kind))
    return shapes


def parse_shapes(text):
    """[Bx]MxNxK:LAYOUT,... as (m, n, k, layout, batch) tuples."""
    shapes = []
    for item in text.split(","):
        dims, _, layout = item.strip().partition(":")
        layout = layout or "rr"
        try:
            sizes = [int(d) for d in dims.split("x")]
            batch, m, n, k = sizes if len(sizes) == 4 else [1, *sizes]
        except ValueError:
            mb.setup_error(f"--shapes: {item!r} is not [Bx]MxNxK:LAYOUT")
        if layout not in ("rr", "rc", "cr", "cc") or min(batch, m, n, k) < 1:
            mb.setup_error(f"--shapes: {item!r}: positive dims and a layout of rr, rc, cr or cc")
        shapes.append((m, n, k, layout, batch))
    return shapes


def time_as_graphs(runtimes, operands, poisoned_c, make_desc, error_of, first, tolerance):
    """Every side's calls (runtimes: name -> (library, runtime)) and cuBLAS's as CUDA graph
    replays over rotating input sets (matmul_bench.make_graph_rounds), each side's output of
    every set verified afterwards. Returns name -> {ms, error, verified, shape}."""
    import torch
    a_store, b_store = first[:2]
    sets = mb.rotation_sets(a_store.element_size() * (a_store.numel() + b_store.numel()))
    calls = mb.graph_calls(sets)
    inputs = [first] + [operands() for _ in range(sets - 1)]
    outputs = {name: [poisoned_c() for _ in range(sets)] for name in runtimes}
    descs = {name: [ctypes.byref(make_desc(i[0], i[1], c)) for i, c in zip(inputs, outputs[name])]
             for name in runtimes}

    def side(name):
        lib, runtime = runtimes[name]

        def call(i):  # on the current stream: the capture's while the graph is made
            mb.check(lib, lib.tilesmith_matmul_ex(runtime, descs[name][i % sets],
                                                  torch.cuda.current_stream().cuda_stream),
                     "tilesmith_matmul_ex (graph)")
        return call

    fns = {name: side(name) for name in runtimes}
    fns["cb"] = lambda i: torch.matmul(inputs[i % sets][2], inputs[i % sets][3])
    times = mb.make_graph_rounds(calls)(fns)
    result = {}
    for name, (ms, _) in times.items():
        worst = 0.0
        for i, c in zip(inputs, outputs.get(name, [])):
            worst = max(worst, error_of(c, i[4]) if bool(torch.isfinite(c).all()) else float("inf"))
        result[name] = {"ms": ms, "error": worst, "verified": worst <= tolerance,
                        "shape": f"{sets}x{calls}"}
    return result


def shape_name(batch, m, n, k):
    return f"{batch}x{m}x{n}x{k}" if batch > 1 else f"{m}x{n}x{k}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=44, help="draws (those past 2.2e11 M*N*K are dropped)")
    p.add_argument("--seed", type=int, default=15)
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--narrow-n", action="store_true",
                      help="draw N in 1..64 instead of 64..16384")
    kind.add_argument("--few-columns", action="store_true",
                      help="draw many rows of A times 1-4 columns of B instead "
                           "(a matrix times a vector)")
    kind.add_argument("--within", metavar="M_LO-M_HIxN_LO-N_HIxK_LO-K_HI",
                      help="draw M, N and K log-uniform in these ranges (a rule's domain)")
    p.add_argument("--shapes", help="MxNxK:LAYOUT,... to time instead of drawing shapes")
    p.add_argument("--lib", default=os.path.join(REPO, "build", "libtilesmith.so"))
    p.add_argument("--baseline", help="another build's libtilesmith.so, timed beside --lib")
    p.add_argument("--json", help="also write the rows as JSON")
    p.add_argument("--warmup-ms", type=float, default=60.0)
    p.add_argument("--rep-ms", type=float, default=40.0)
    p.add_argument("--dtype", choices=("bf16", "f16", "f32"), default="bf16",
                   help="A, B and C (f32: multiplied as tf32 by both sides, checked against fp64)")
    p.add_argument("--config", action="append", default=[], metavar="LABEL=CONFIG",
                   help="also time this config (k=v,...) of every shape, from its own database")
    p.add_argument("--tilesmith", default=os.path.join(REPO, "build", "tilesmith"),
                   help="the CLI that fills each --config's database")
    p.add_argument("--graph", action="store_true",
                   help="also time every side as CUDA graph replays over cold rotating inputs")
    args = p.parse_args()
    within = parse_within(args.within) if args.within else None
    configs = []
    for item in args.config:
        label, _, config = item.partition("=")
        if not label or not config or label in ("ts", "base", "cb"):
            mb.setup_error(f"--config {item!r}: want LABEL=k=v,... (LABEL not ts, base or cb)")
        configs.append((label, config))
    if configs and not os.path.isfile(args.tilesmith):
        mb.setup_error(f"{args.tilesmith} not found (build it, or pass --tilesmith)")
    try:
        import torch
    except ImportError:
        mb.setup_error("torch is needed for the cuBLAS column")
    if not torch.cuda.is_available():
        mb.setup_error("no GPU: the shapes are timed on one")
    # name -> (library, runtime over an empty database: every call takes the default)
    sides = {}
    for name, path in (("ts", args.lib), ("base", args.baseline)):
        if path:
            lib = mb.load_lib(path)
            db = os.path.join(tempfile.mkdtemp(prefix="matmul_shapes."), "empty.db")
            sides[name] = (lib, mb.create_runtime(lib, db))
    if len(sides) == 2 and sides["ts"][0]._handle == sides["base"][0]._handle:
        mb.setup_error("--baseline loaded as the same library as --lib (the same file?)")
    stream = torch.cuda.current_stream().cuda_stream
    rounds = mb.make_rounds(args.warmup_ms, args.rep_ms)
    code = mb.DTYPE_CODES[args.dtype]
    tf32, tolerance = mb.compare_inputs(torch, args.dtype)
    dtype = mb.torch_dtype(torch, args.dtype)
    rows, failed, failed_configs = [], 0, 0
    if args.shapes:
        shapes = parse_shapes(args.shapes)
    elif args.few_columns:
        shapes = draw_few_columns(args.count, args.seed)
    else:
        shapes = draw_shapes(args.count, args.seed, args.narrow_n, within)
    for m, n, k, layout, *batched in shapes:
        batch = batched[0] if batched else 1
        a_col, b_col = layout[0] == "c", layout[1] == "c"

        def operands():
            """Fresh random A and B (A scaled by 1/sqrt(K)): storage, the product's views, and
            the fp32 reference (fp64 products for tf32's inputs)."""
            a_store = torch.randn(batch, *((k, m) if a_col else (m, k)), device="cuda", dtype=dtype)
            a_store *= k ** -0.5
            b_store = torch.randn(batch, *((n, k) if b_col else (k, n)), device="cuda", dtype=dtype)
            a = (a_store.transpose(1, 2) if a_col else a_store).squeeze(0)
            b = (b_store.transpose(1, 2) if b_col else b_store).squeeze(0)
            reference = (torch.matmul(a.double(), b.double()) if tf32
                         else torch.matmul(a.float(), b.float())).float()
            return a_store, b_store, a, b, reference

        def poisoned_c():
            return torch.full((batch, m, n), float("nan"), device="cuda", dtype=dtype).squeeze(0)

        def make_desc(a_store, b_store, c):
            return mb._capi.MatmulDesc(a_store.data_ptr(), b_store.data_ptr(), c.data_ptr(), batch,
                                       m, n, k, code, code, int(a_col), int(b_col), None, None, 0)

        def error_of(c, reference):
            return float((c.float() - reference).norm() / reference.norm())

        a_store, b_store, a, b, reference = operands()
        calls, errors, runtimes = {}, {}, {}

        def add_call(name, lib, runtime):
            """Verifies `runtime`'s product (into its own NaN-poisoned C) and keeps its call for the
            rounds; returns the descriptor."""
            c = poisoned_c()
            desc = make_desc(a_store, b_store, c)

            # `keep` holds the descriptor and C for the rounds.
            def call(lib=lib, runtime=runtime, d=ctypes.byref(desc), keep=(desc, c)):
                mb.check(lib, lib.tilesmith_matmul_ex(runtime, d, stream), "tilesmith_matmul_ex")

            call()
            torch.cuda.synchronize()
            errors[name] = error_of(c, reference)
            calls[name], runtimes[name] = call, (lib, runtime)
            return desc

        for name, (lib, runtime) in sides.items():
            add_call(name, lib, runtime)
        used, config_runtimes = {}, []  # label -> the config its runtime ran
        for label, config in configs:
            lib = sides["ts"][0]
            db = os.path.join(tempfile.mkdtemp(prefix="matmul_shapes."), f"{label}.db")
            command = [args.tilesmith, "tune", "--op", "matmul", "--dtype", args.dtype,
                       "--shape", shape_name(batch, m, n, k), "--only", config, "--db", db]
            command += ["--option", "a=col"] if a_col else []
            command += ["--option", "b=col"] if b_col else []
            tuned = subprocess.run(command, capture_output=True, text=True, errors="replace")
            if tuned.returncode != 0:
                last = (tuned.stdout + tuned.stderr).strip().splitlines()[-1:]
                print(f"  {label}: not timed ({' '.join(last) or f'tune exited {tuned.returncode}'})")
                continue
            runtime = mb.create_runtime(lib, db)
            config_runtimes.append(runtime)
            desc = add_call(label, lib, runtime)
            text, is_tuned = ctypes.create_string_buffer(1024), ctypes.c_int()
            mb.check(lib, lib.tilesmith_matmul_ex_config(runtime, ctypes.byref(desc), text, len(text),
                                                         ctypes.byref(is_tuned)), "tilesmith_matmul_ex_config")
            used[label] = text.value.decode()
        ok = all(math.isfinite(errors[name]) and errors[name] <= tolerance for name in sides)
        failed += not ok
        timed = rounds({**calls, "cb": lambda: torch.matmul(a, b)})
        ts_ms, cb_ms = timed["ts"][0], timed["cb"][0]
        row = {"batch": batch, "m": m, "n": n, "k": k, "layout": layout, "ts_ms": ts_ms,
               "cb_ms": cb_ms, "x_cublas": cb_ms / ts_ms, "error": errors["ts"], "verified": ok}
        against = ""
        if "base" in timed:
            row["base_ms"] = timed["base"][0]
            row["x_base"] = row["base_ms"] / ts_ms
            row["base_error"] = errors["base"]
            against = f"  base {row['base_ms']:.4f}  x base {row['x_base']:.3f}"
        rows.append(row)
        print(f"{f'{batch}x' if batch > 1 else ''}{m:>5}x{n:>5}x{k:>5} {layout}  ts {ts_ms:.4f}  "
              f"cuBLAS {cb_ms:.4f} ms  x {row['x_cublas']:.3f}{against}  "
              f"{2 * batch * m * n * k / ts_ms / 1e9:7.1f} TFLOP/s  "
              f"err {max(errors[name] for name in sides):.1e}{'' if ok else '  FAILED'}", flush=True)
        row["configs"] = {}
        for label in used:
            config_ok = math.isfinite(errors[label]) and errors[label] <= tolerance
            failed_configs += not config_ok
            ms = timed[label][0]
            row["configs"][label] = {"config": used[label], "ms": ms, "error": errors[label],
                                     "verified": config_ok}
            print(f"  {label}: {ms:.4f} ms  x default {ts_ms / ms:.3f}  x cuBLAS {cb_ms / ms:.3f}  "
                  f"err {errors[label]:.1e}{'' if config_ok else '  FAILED'}  [{used[label]}]", flush=True)
        if args.graph:
            row["graph"] = time_as_graphs(runtimes, operands, poisoned_c, make_desc, error_of,
                                          (a_store, b_store, a, b, reference), tolerance)
            graph, line = row["graph"], []
            for name, entry in graph.items():
                if name in sides:
                    failed += not entry["verified"]
                else:
                    failed_configs += not entry["verified"]
                x_cublas = graph["cb"]["ms"] / entry["ms"]
                against = "" if name == "cb" else f" (x cuBLAS {x_cublas:.3f})"
                line.append(f"{name} {entry['ms'] * 1e3:.2f} us{against}"
                            + ("" if entry["verified"] else " FAILED"))
            print(f"  graph {graph['cb']['shape']}: " + ", ".join(line), flush=True)
        torch.cuda.synchronize()
        for runtime in config_runtimes:
            sides["ts"][0].tilesmith_runtime_destroy(runtime)
    geomean = math.exp(sum(math.log(r["x_cublas"]) for r in rows) / len(rows))
    worst = sorted(rows, key=lambda r: r["x_cublas"])[:8]
    if args.baseline:
        base_geomean = math.exp(sum(math.log(r["x_base"]) for r in rows) / len(rows))
        print(f"geomean x baseline ({args.baseline}): {base_geomean:.3f}")
    if args.graph:
        def graph_geomean(name):
            ratios = [r["graph"]["cb"]["ms"] / r["graph"][name]["ms"] for r in rows]
            return math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        line = f"as CUDA graphs, geomean x cuBLAS: ts {graph_geomean('ts'):.3f}"
        if args.baseline:
            line += f", base {graph_geomean('base'):.3f}"
        print(line)
    source = "given" if args.shapes else f"seed {args.seed}" + (
        ", N in 1..64" if args.narrow_n else f", within {args.within}" if args.within else "")
    print(f"geomean x cuBLAS over {len(rows)} shapes ({source}): {geomean:.3f}; "
          f"{len(rows) - failed} verified{f'; {failed_configs} --config runs FAILED' if failed_configs else ''}; worst: "
          + ", ".join(f"{shape_name(r['batch'], r['m'], r['n'], r['k'])} {r['layout']} "
                      f"{r['x_cublas']:.2f}" for r in worst))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": None if args.shapes else args.seed, "geomean_x_cublas": geomean,
                       "rows": rows}, f, indent=1)
    return 1 if failed or failed_configs else 0


if __name__ == "__main__":
    sys.exit(main())
