#!/usr/bin/env python3
"""Benchmark tilesmith's matmul against cuBLAS (torch.matmul), same run, side by side.

usage: matmul_bench.py [--shapes MxNxK,...] [--dtype bf16|f16] [--out-dtype bf16|f16|f32]
                       [--lib PATH] [--db PATH] [--csv FILE] [--json FILE]
                       [--warmup-ms MS] [--rep-ms MS]

Every shape is first verified (NaN-poisoned output, relative Frobenius error against an fp32
reference), then timed. Exit status: 0 all verified, 1 a verification failure, 2 setup problem.
"""
import argparse, ctypes, csv, functools, json, math, os, subprocess, sys, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python", "tilesmith"))
import _capi  # noqa: E402  (the C ABI through ctypes; no torch needed to import it)

DTYPE_CODES = _capi.DTYPE
TOLERANCE = {"bf16": 1e-2, "f16": 2e-3, "f32": 5e-4}  # by the output dtype's precision
TF32_TOLERANCE = 5e-3  # the matmul family's for fp32 inputs (multiplied as tf32)
PROG = "matmul_bench"  # the name setup errors carry; a script importing this module sets its own


def torch_dtype(torch, name):
    """torch's dtype for a tilesmith dtype name (bf16, f16, f32)."""
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]


def compare_inputs(torch, name):
    """(tf32, tolerance) for inputs of dtype `name`, torch's matmul set to match: fp32 inputs
    are multiplied as tf32 by everyone timed and checked against an fp64 reference (tf32 keeps
    10 mantissa bits of each input: ~1e-3 relative over a long sum); 16-bit inputs against a
    reference that must really be fp32."""
    tf32 = name == "f32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return tf32, TF32_TOLERANCE if tf32 else TOLERANCE[name]


def setup_error(message):
    print(f"{PROG}: setup error: {message}", file=sys.stderr)
    sys.exit(2)


def load_lib(path):
    """Loads libtilesmith with every C signature declared (python/tilesmith/_capi.py, shared with
    the Python package); a setup error when it cannot."""
    if not os.path.isfile(path):
        setup_error(f"{path} not found (build it, or pass --lib)")
    try:
        return _capi.load(path)
    except _capi.TilesmithError as error:
        setup_error(str(error))


check = _capi.check  # raises for a non-zero status, with the library's message
create_runtime = _capi.create_runtime  # (lib, database path or None)


def tune_with_cli(args, op, dtype, shape, options, log):
    """One `tilesmith tune` of a problem (options: NAME=VALUE items, defaults left out), budgeted
    by args.tune_budget (Ns, N candidates, all, none) and appended to `log`; returns a note
    for the row: its seconds and exit status."""
    if args.tune_budget == "none":
        return "not tuned"
    command = [args.tilesmith, "tune", "--op", op, "--dtype", dtype, "--shape", shape]
    for option in options:
        command += ["--option", option]
    if args.tune_budget != "all":
        command += ["--budget", args.tune_budget, "--strategy", "random"]
    if args.db:
        command += ["--db", args.db]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, errors="replace")
    if log:
        log.write(f"\n== {' '.join(command)}\n{result.stdout}{result.stderr}")
        log.flush()
    return f"{time.perf_counter() - start:.0f}s rc={result.returncode}"


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        try:
            m, n, k = (int(x) for x in item.strip().lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad shape {item!r}: want MxNxK")
        if min(m, n, k) <= 0:
            raise argparse.ArgumentTypeError(f"bad shape {item!r}: sizes must be positive")
        shapes.append((m, n, k))
    return shapes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", type=parse_shapes,
                   default=parse_shapes("4096x4096x4096,8192x8192x8192,4093x4093x4093,16x4096x4096"))
    p.add_argument("--dtype", choices=["bf16", "f16"], default="bf16")
    p.add_argument("--out-dtype", choices=["bf16", "f16", "f32"], default=None,
                   help="default: --dtype")
    p.add_argument("--lib", default=os.path.join(REPO, "build", "libtilesmith.so"))
    p.add_argument("--db", default=os.environ.get("TILESMITH_DB"),
                   help="tuning database (default: $TILESMITH_DB, else the library default)")
    p.add_argument("--csv", help="also write the table as CSV")
    p.add_argument("--json", help="also write header and results as JSON")
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--rep-ms", type=float, default=200.0)
    args = p.parse_args(argv)
    if args.out_dtype is None:
        args.out_dtype = args.dtype
    if args.out_dtype not in (args.dtype, "f32"):
        p.error("--out-dtype must be --dtype or f32")
    return args


def peak_tflops(name):
    """Dense bf16/f16 tensor-core peak from the data sheets (no sparsity)."""
    if "H100" in name:
        return 756.0 if "PCIe" in name else 835.0 if "NVL" in name else 989.0
    return 989.0 if "H200" in name else None


def cublas_version():
    """cuBLAS has no torch API for its version: ask the libcublas torch already loaded."""
    try:
        paths = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcublas.so" in l})
        lib = ctypes.CDLL(paths[0])
        lib.cublasGetProperty.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        parts = [ctypes.c_int() for _ in range(3)]  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        if any(lib.cublasGetProperty(i, ctypes.byref(v)) != 0 for i, v in enumerate(parts)):
            return "unknown"
        return ".".join(str(v.value) for v in parts)
    except Exception:
        return "unknown"


def median(values):
    """The middle value (the upper of the two middle ones of an even count)."""
    values = sorted(values)
    return float(values[len(values) // 2])


@functools.lru_cache(maxsize=None)
def l2_scrub(flush="read"):
    """The pass over a 256 MB buffer (5x the H100's L2) that make_bench and make_rounds run
    before every rep, one buffer per kind for every timer of the process: "read" sums it,
    "write" zeroes it (see make_bench)."""
    import torch
    buffer = torch.ones(64 << 20, dtype=torch.float32, device="cuda")
    return (lambda: buffer.sum()) if flush == "read" else (lambda: buffer.zero_())


def make_bench(warmup_ms, rep_ms, flush="read"):
    """A timer of fn in milliseconds, do_bench's method (CUDA events around each rep, warm-up by
    time, the median so stray slow reps do not move the result) with L2 flushed before every rep
    by a pass over a 256 MB buffer (5x the H100's L2), so no input stays cache-resident between
    reps. flush="read" sums the buffer: L2 is left holding clean lines, which cost nothing to
    evict. flush="write" zeroes it, as triton's do_bench does: L2 is then left full of dirty
    lines (~50 MB on an H100), and the timed kernel pays for writing them back to DRAM as it
    evicts them, ~15 us for any kernel that streams more than the L2 (measured on decode
    shapes; see docs/perf/matmul.md, v5). Both flushes run before the start event."""
    import torch
    scrub = l2_scrub(flush)

    def bench(fn):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            scrub()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / 5, 1e-3)  # ms per rep, flush included
        for _ in range(max(1, int(warmup_ms / estimate))):
            scrub()
            fn()
        reps = max(5, int(rep_ms / estimate))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            scrub()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return median(s.elapsed_time(e) for s, e in zip(starts, ends))
    return bench


def make_rounds(warmup_ms, rep_ms, flush="read"):
    """A timer of several implementations side by side: each round runs every one once, each
    after its own L2 flush (as make_bench's) and between its own two events, the round's first
    rotating. All of them thus run at the same clocks whatever the power limit and the heat do
    during the run; in separate blocks of reps (make_bench, one implementation after another)
    the block that follows an idle spell runs at boost clock and a later one at the lower,
    settled clock, 5-20% apart on the large shapes (docs/perf/matmul.md, v18). Warm-up by time,
    whole rounds; as many rounds as give each implementation 2 x rep_ms of reps. Returns, per
    name, the median of its reps and the spread between the medians of the first and second
    half of the rounds (in % of the median: the drift over the run, alike for all)."""
    import torch
    scrub = l2_scrub(flush)

    def timed(fns):  # fns: {name: callable}; returns {name: (median ms, spread %)}
        names, calls = list(fns), list(fns.values())
        for fn in calls:
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            for fn in calls:
                scrub()
                fn()
        end.record()
        torch.cuda.synchronize()
        round_ms = max(start.elapsed_time(end) / 3, 1e-3)  # flushes included
        for _ in range(max(1, int(warmup_ms / round_ms))):
            for fn in calls:
                scrub()
                fn()
        rounds = max(10, int(2 * rep_ms * len(calls) / round_ms))
        events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                   for _ in range(rounds)] for _ in calls]
        for r in range(rounds):
            for j in range(len(calls)):
                i = (r + j) % len(calls)
                scrub()
                events[i][r][0].record()
                calls[i]()
                events[i][r][1].record()
        torch.cuda.synchronize()
        result = {}
        for name, pairs in zip(names, events):
            times = [s.elapsed_time(e) for s, e in pairs]
            mid = median(times)
            halves = median(times[:rounds // 2]), median(times[rounds // 2:])
            result[name] = (mid, abs(halves[0] - halves[1]) / mid * 100)
        return result
    return timed


def rotation_sets(bytes_per_call, cold_bytes=256 << 20, most=64):
    """How many input sets a graph of calls rotates among so that every call finds its operands
    cold: the other sets' bytes, read in between, are 5x the H100's 50 MB L2."""
    return max(2, min(most, math.ceil(cold_bytes / max(bytes_per_call, 1)) + 1))


def graph_calls(sets):
    """The calls a graph over `sets` rotating input sets holds: each set twice, 16 at least."""
    return max(16, 2 * sets)


def make_graph_rounds(calls, replays=40):
    """A timer of calls that serving loops issue back to back (decode: one small product per
    layer, captured as CUDA graphs): per implementation, one CUDA graph of `calls` calls
    fn(0), ..., fn(calls - 1), where call i reads input set i % sets (rotation_sets: each call's
    operands cold in L2, nothing flushed between calls), timed by events around each replay, the
    implementations alternating replay by replay (as make_rounds). A single launch timed by its
    own events also pays the events' latency to the kernel and the launch (~3 us on the H100,
    docs/perf/matmul.md v14), a quarter of a 4096x4096 weight's read; in a graph the calls follow
    each other as a model's layers do. Every fn is called once per index before capture, on the
    capture's stream (first-call compiles and workspaces stay out of the graph). Returns, per
    name, the median replay's time over `calls` and the spread between the medians of the first
    and second half of the replays (in % of the median)."""
    import torch

    def timed(fns):  # fns: {name: callable(index)}; returns {name: (ms a call, spread %)}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        graphs = {}
        with torch.cuda.stream(side):
            for fn in fns.values():
                for i in range(calls):
                    fn(i)
        torch.cuda.synchronize()
        for name, fn in fns.items():
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                for i in range(calls):
                    fn(i)
            graphs[name] = graph
        names = list(graphs)
        for _ in range(3):
            for name in names:
                graphs[name].replay()
        torch.cuda.synchronize()
        events = {name: [] for name in names}
        for r in range(replays):
            for j in range(len(names)):
                name = names[(r + j) % len(names)]
                start, end = (torch.cuda.Event(enable_timing=True),
                              torch.cuda.Event(enable_timing=True))
                start.record()
                graphs[name].replay()
                end.record()
                events[name].append((start, end))
        torch.cuda.synchronize()
        result = {}
        for name in names:
            times = [s.elapsed_time(e) / calls for s, e in events[name]]
            mid = median(times)
            halves = median(times[:replays // 2]), median(times[replays // 2:])
            result[name] = (mid, abs(halves[0] - halves[1]) / mid * 100)
        return result
    return timed


def copy_bandwidth_gbs(bench):
    """Device-to-device copy bandwidth in GB/s, timed by bench (L2 flushed): a 1 GiB copy reads
    and writes, so 2 GiB move."""
    import torch
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_gbs = 2 * src.numel() / (bench(lambda: dst.copy_(src)) * 1e-3) / 1e9
    src = dst = None  # freed before empty_cache hands the memory back
    torch.cuda.empty_cache()
    return copy_gbs


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch, triton, triton.testing
    except Exception as error:  # ImportError, or a broken install failing at import
        setup_error(f"{error} (this benchmark needs torch and triton)")
    if not torch.cuda.is_available():
        setup_error("torch sees no CUDA device")
    lib = load_lib(args.lib)
    try:
        rt = create_runtime(lib, args.db)
    except RuntimeError as error:
        setup_error(str(error))
    in_dt, out_dt = torch_dtype(torch, args.dtype), torch_dtype(torch, args.out_dtype)
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must really be fp32
    torch.manual_seed(0)

    bench = make_bench(args.warmup_ms, args.rep_ms)
    copy_gbs = copy_bandwidth_gbs(bench)
    torch.matmul(torch.ones(8, 8, device="cuda", dtype=in_dt),
                 torch.ones(8, 8, device="cuda", dtype=in_dt))  # so cuBLAS is loaded to ask
    gpu = torch.cuda.get_device_name()
    peak = peak_tflops(gpu)
    header = {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
              "triton": triton.__version__, "cublas": cublas_version(), "copy_GBps": copy_gbs,
              "peak_TFLOPs": peak, "dtype": args.dtype, "out_dtype": args.out_dtype,
              "db": args.db or "(library default)", "timing": "median of event-timed reps"
              f" (warmup {args.warmup_ms} ms, rep {args.rep_ms} ms), L2 flushed"}
    for key, value in header.items():
        shown = f"{value:.1f}" if isinstance(value, float) else value
        print(f"{key:>11}: {'unknown' if shown is None else shown}")
    if args.out_dtype != args.dtype:
        print(f"{'note':>11}: cuBLAS anchor torch.matmul(A, B) writes {args.dtype}, "
              f"tilesmith writes {args.out_dtype}")

    stream = torch.cuda.current_stream().cuda_stream
    d_in, d_out = DTYPE_CODES[args.dtype], DTYPE_CODES[args.out_dtype]
    rows, failed = [], False
    for index, (m, n, k) in enumerate(args.shapes):
        row = {"shape": f"{m}x{n}x{k}", "ts_ms": None, "ts_spread": None, "cb_ms": None,
               "cb_spread": None, "tuned": None, "config": "", "rel_err": None, "status": "ok"}
        rows.append(row)
        try:
            buf, tuned = ctypes.create_string_buffer(1024), ctypes.c_int(0)
            check(lib, lib.tilesmith_matmul_config(rt, m, n, k, d_in, d_out, buf, len(buf),
                                                   ctypes.byref(tuned)), "tilesmith_matmul_config")
            row["config"], row["tuned"] = buf.value.decode(), bool(tuned.value)
            # Random normal inputs: zeros (or ones) would hide wrong indexing and a missing K tail.
            a = torch.randn(m, k, device="cuda", dtype=in_dt)
            b = torch.randn(k, n, device="cuda", dtype=in_dt)
            # NaN-poisoned output: an element the kernel never writes stays NaN and is caught,
            # where zeros could pass for a correct result (e.g. an unstored edge tile).
            c = torch.full((m, n), float("nan"), device="cuda", dtype=out_dt)
            def run_ts():
                check(lib, lib.tilesmith_matmul(rt, a.data_ptr(), b.data_ptr(), c.data_ptr(),
                                                m, n, k, d_in, d_out, stream), "tilesmith_matmul")
            run_ts()  # also the first-call lookup / NVRTC compile, outside the timing
            torch.cuda.synchronize()
            bad = int((~torch.isfinite(c)).sum())
            ref = torch.matmul(a.float(), b.float())
            row["rel_err"] = float(torch.linalg.vector_norm(c.float() - ref)
                                   / torch.linalg.vector_norm(ref))
            del ref
            if bad:
                row["status"], failed = f"FAIL {bad} non-finite", True
            elif not row["rel_err"] <= TOLERANCE[args.out_dtype]:
                row["status"], failed = f"FAIL err>{TOLERANCE[args.out_dtype]:g}", True
            # Interleave the two, swapping who goes first on every other shape, so clock or
            # thermal drift hits both alike; two medians each make run-to-run noise visible.
            run_cb = lambda: torch.matmul(a, b)
            order = [("ts", run_ts), ("cb", run_cb)]
            times = {"ts": [], "cb": []}
            for key, fn in (order if index % 2 == 0 else order[::-1]) * 2:
                times[key].append(bench(fn))
            for key, (t1, t2) in times.items():
                row[f"{key}_ms"] = (t1 + t2) / 2  # the median of two values
                row[f"{key}_spread"] = abs(t1 - t2) / row[f"{key}_ms"] * 100
            a = b = c = None  # free this shape's tensors before the next one's
            torch.cuda.empty_cache()
        except Exception as error:  # report it and go on with the other shapes
            row["status"], failed = f"ERROR {error}".replace("\n", " ")[:120], True
            a = b = c = None
    lib.tilesmith_runtime_destroy(rt)

    def tflops(ms, shape):
        m, n, k = shape
        return 2 * m * n * k / (ms * 1e-3) / 1e12 if ms else None
    in_size, out_size = in_dt.itemsize, out_dt.itemsize
    for row, (m, n, k) in zip(rows, args.shapes):
        row["ratio"] = row["cb_ms"] / row["ts_ms"] if row["ts_ms"] and row["cb_ms"] else None
        row["ts_tflops"] = tflops(row["ts_ms"], (m, n, k))
        row["cb_tflops"] = tflops(row["cb_ms"], (m, n, k))
        row["pct_peak"] = row["ts_tflops"] / peak * 100 if peak and row["ts_tflops"] else None
        moved = in_size * (m * k + k * n) + out_size * m * n
        row["floor_ms"] = (max(2 * m * n * k / (peak * 1e12), moved / (copy_gbs * 1e9)) * 1e3
                           if peak else None)
    for row in rows:  # configs here: too wide for the table, which must come last
        # Untuned: the default, or (the database holding other shapes) a nearby shape's winner.
        kind = {True: "tuned", False: "untuned", None: "?"}[row["tuned"]]
        print(f"config {row['shape']:>16} ({kind}): {row['config'] or '-'}")

    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if args.json:
        with open(args.json, "w") as f:
            clean = [{key: None if isinstance(v, float) and not math.isfinite(v) else v
                      for key, v in row.items()} for row in rows]  # strict JSON has no NaN
            json.dump({"header": header, "rows": clean}, f, indent=2)

    def fmt(value, spec, spread=None):
        if value is None:
            return "-"
        return f"{value:{spec}}" + (f" ±{spread:.1f}%" if spread is not None else "")
    cols = [("shape", 16), ("tilesmith ms", 16), ("cuBLAS ms", 16), ("ratio", 6),
            ("ts TFLOP/s", 10), ("cuBLAS TFLOP/s", 14), ("% peak", 6), ("floor ms", 9),
            ("tuned", 5), ("rel err", 8), ("status", 0)]
    print()
    print(" | ".join(f"{name:>{w}}" for name, w in cols))
    print("-+-".join("-" * max(w, len(name)) for name, w in cols))
    for r in rows:
        cells = [r["shape"], fmt(r["ts_ms"], ".4f", r["ts_spread"]),
                 fmt(r["cb_ms"], ".4f", r["cb_spread"]), fmt(r["ratio"], ".3f"),
                 fmt(r["ts_tflops"], ".1f"), fmt(r["cb_tflops"], ".1f"),
                 fmt(r["pct_peak"], ".1f"), fmt(r["floor_ms"], ".4f"),
                 {True: "yes", False: "no", None: "-"}[r["tuned"]], fmt(r["rel_err"], ".2e"),
                 r["status"]]
        print(" | ".join(f"{cell:>{w}}" for cell, (_, w) in zip(cells, cols)))
    ratios = [r["ratio"] for r in rows if r["ratio"] and r["status"] == "ok"]
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
    print(f"geomean ratio (cuBLAS ms / tilesmith ms, >1: tilesmith faster) over "
          f"{len(ratios)} verified shape(s): {geomean:.3f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
