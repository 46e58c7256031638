#!/usr/bin/env python3
"""tilesmith's matmul beside cuBLAS (torch.matmul) and Inductor (torch.compile), in one run.

The suite: squares, LLM projections (x @ W.t(), B column-major), unaligned and K-heavy shapes,
both transposed A layouts, one batched case; --epilogue adds fused bias/activation/residual cases.
Per case: optionally tune tilesmith first (build/tilesmith tune, skipped when the database already
has a winner), verify its output (NaN-poisoned C, relative Frobenius error against an fp32
reference), compile the Inductor version (torch._dynamo.reset() first, static shapes), then time
the three side by side (matmul_bench.make_rounds: rep by rep, each after its own L2 flush and
between its own CUDA events, after a warm-up that lets the clocks settle; the median). The cases of
M <= 16 (decode) are timed a second way, as a serving loop runs them: CUDA graphs of many calls
over rotating inputs (matmul_bench.make_graph_rounds), every set's output verified. The table
comes last; --json writes the rows so that the parts of a split suite (--part i/N, --cases REGEX)
can be joined with --merge.

Exit status: 0 every case that ran verified, 1 a verification failure or error (the run goes on
with the other cases), 2 setup problem (no torch/triton, no GPU, no library, bad arguments).
"""
import argparse, ctypes, json, math, os, re, signal, subprocess, sys, threading, time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matmul_bench as mb  # noqa: E402  (loading, checking, timing helpers; stdlib-only at import)

mb.PROG = "matmul_suite"
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "silu": 3}  # enum tilesmith_activation
ROW_MAJOR, COLUMN_MAJOR = 0, 1  # enum tilesmith_layout
INDUCTOR_MODE = "max-autotune-no-cudagraphs"
FLOOR_MAX_M = 16  # rows at or below this M get the memory-floor ratio (they are bandwidth bound)
# A side whose two halves' medians differ by more than this (%) is flagged in the short table:
# its ratios are not to be trusted (an H200 run once had cuBLAS's halves 28% apart at 1000^3).
NOISY_SPREAD = 10.0


MatmulDesc = mb._capi.MatmulDesc  # zero strides are the packed ones


# ---------------------------------------------------------------------------------------------
# The suite


@dataclass(frozen=True)
class Case:
    name: str
    group: str
    m: int
    n: int
    k: int
    batch: int = 1
    a_col: bool = False  # A stored k x m (a_storage.t() @ b)
    b_col: bool = False  # B stored n x k (x @ W.t(), nn.Linear's weight)
    bias: bool = False
    act: str = "none"
    residual: bool = False

    @property
    def shape(self):
        dims = (self.batch,) if self.batch > 1 else ()
        return "x".join(str(d) for d in dims + (self.m, self.n, self.k))

    @property
    def epilogue(self):
        parts = (["bias"] if self.bias else []) + ([self.act] if self.act != "none" else []) \
            + (["residual"] if self.residual else [])
        return "+".join(parts)

    @property
    def layout(self):
        """'rr', 'rc', 'cr', 'cc': A's then B's storage (r: row-major, c: column-major)."""
        text = ("c" if self.a_col else "r") + ("c" if self.b_col else "r")
        return text + ("+" + self.epilogue if self.epilogue else "")

    def tune_options(self):
        options = (["a=col"] if self.a_col else []) + (["b=col"] if self.b_col else [])
        options += (["bias=1"] if self.bias else []) + (
            [f"act={self.act}"] if self.act != "none" else [])
        options += ["residual=1"] if self.residual else []
        return [arg for option in options for arg in ("--option", option)]

    def flops(self):
        return 2 * self.batch * self.m * self.n * self.k

    def min_bytes(self, in_size, out_size):
        """The fewest bytes the call must move: A and B read once, C written once, plus the
        epilogue's inputs."""
        total = in_size * self.batch * (self.m * self.k + self.k * self.n)
        total += out_size * self.batch * self.m * self.n
        total += out_size * self.n if self.bias else 0
        total += out_size * self.batch * self.m * self.n if self.residual else 0
        return total


def suite_cases():
    cases = [Case(f"square.{s}", "square", s, s, s) for s in (2048, 4096, 8192)]
    # Llama-3-8B's projections (hidden 4096, MLP 14336), weights stored N x K as nn.Linear's:
    # q/o_proj N=K=4096, gate/up_proj 14336 x 4096, down_proj 4096 x 14336; M = tokens.
    for proj, (n, k) in (("qo_proj", (4096, 4096)), ("up_proj", (14336, 4096)),
                         ("down_proj", (4096, 14336))):
        for m in (1, 16, 128, 1024, 4096, 8192):
            cases.append(Case(f"{proj}.m{m}", "llm", m, n, k, b_col=True))
    cases += [Case("unaligned.1000", "unaligned", 1000, 1000, 1000),
              Case("unaligned.4093", "unaligned", 4093, 4093, 4093),
              Case("k_heavy.512", "k_heavy", 512, 512, 16384),
              Case("a_col.4096", "layout", 4096, 4096, 4096, a_col=True),
              Case("ab_col.4096", "layout", 4096, 4096, 4096, a_col=True, b_col=True),
              Case("bmm.8x2048", "batched", 2048, 2048, 2048, batch=8)]
    return cases


def epilogue_cases():
    return [Case("epi.bias_gelu.4096", "epilogue", 4096, 4096, 4096, bias=True, act="gelu"),
            Case("epi.up_proj.bias_silu.m4096", "epilogue", 4096, 14336, 4096, b_col=True,
                 bias=True, act="silu"),
            Case("epi.down_proj.residual.m4096", "epilogue", 4096, 4096, 14336, b_col=True,
                 residual=True)]


def canonical_order():
    return {case.name: i for i, case in enumerate(suite_cases() + epilogue_cases())}


def select_cases(args):
    cases = suite_cases() + (epilogue_cases() if args.epilogue else [])
    if args.cases:
        cases = [case for case in cases if args.cases.search(case.name)]
    if args.part:
        index, count = args.part  # round-robin, so that every part gets big and small cases
        cases = cases[index - 1::count]
    return cases


# ---------------------------------------------------------------------------------------------
# Rows: derived columns, table, JSON, merge (pure Python: runs without torch)


def derive(row):
    """Fills the derived columns of a row from its measured ones (idempotent)."""
    def ratio(x, y):
        return x / y if x and y else None
    ts_ms, peak = row.get("ts_ms"), row.get("peak_TFLOPs")
    row["ts_tflops"] = row["flops"] / (ts_ms * 1e-3) / 1e12 if ts_ms else None
    row["pct_peak"] = row["ts_tflops"] / peak * 100 if row["ts_tflops"] and peak else None
    row["x_cublas"] = ratio(row.get("cb_ms"), ts_ms)  # > 1: tilesmith faster
    row["x_inductor"] = ratio(row.get("ind_ms"), ts_ms)
    # Against the faster anchor of the case: Inductor's autotuner picks differently between
    # compiles, and a slow pick should not flatter the suite.
    anchors = [ms for ms in (row.get("cb_ms"), row.get("ind_ms")) if ms]
    row["x_best"] = ratio(min(anchors), ts_ms) if anchors else None
    copy = row.get("copy_GBps")
    row["floor_ms"] = row["min_bytes"] / (copy * 1e9) * 1e3 if copy else None
    row["x_floor"] = (ratio(ts_ms, row["floor_ms"]) if row["m"] <= FLOOR_MAX_M else None)
    # The same calls as CUDA graph replays over cold operands (time_as_graphs: M <= 16).
    graph_ms = row.get("ts_graph_ms")
    row["x_cublas_graph"] = ratio(row.get("cb_graph_ms"), graph_ms)
    row["x_inductor_graph"] = ratio(row.get("ind_graph_ms"), graph_ms)
    row["x_floor_graph"] = ratio(graph_ms, row["floor_ms"]) if graph_ms else None
    return row


def not_run(status):
    return status.startswith("not run")


def format_table(headers, lines, left=(0,)):
    """Aligned columns, widths from the content; the columns numbered in `left` (negative: from
    the end) left-aligned, the others right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *lines)]
    left = {i % len(widths) for i in left}
    def render(cells):
        return " | ".join(f"{str(c):<{w}}" if i in left else f"{str(c):>{w}}"
                          for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [render(headers), "-+-".join("-" * w for w in widths)]
    return "\n".join(out + [render(cells) for cells in lines])


def fmt(value, spec, spread=None):
    if value is None:
        return "-"
    return f"{value:{spec}}" + (f" ±{spread:.1f}%" if spread is not None else "")


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def print_details(rows):
    """Everything the short table leaves out: the three times with their spreads, the errors of
    all three against the fp32 reference, the tune step and Inductor's compile, the configs."""
    lines = []
    for r in rows:
        if not_run(r["status"]):
            continue
        tune = r.get("tune") or {}
        tune_text = "-" if not tune else (
            f"{tune['seconds']:.0f}s rc={tune['rc']}" if tune.get("ran") else tune.get("note", "-"))
        lines.append([r["case"], fmt(r.get("ts_ms"), ".4f", r.get("ts_spread")),
                      fmt(r.get("cb_ms"), ".4f", r.get("cb_spread")),
                      fmt(r.get("ind_ms"), ".4f", r.get("ind_spread")),
                      fmt(r.get("ts_err"), ".1e"), fmt(r.get("cb_err"), ".1e"),
                      fmt(r.get("ind_err"), ".1e"), tune_text,
                      {True: "tuned", False: "default", None: "?"}[r.get("tuned")]])
    if lines:
        print("\ntimes (ms, median ± spread: see the header's timing) and errors against fp32:")
        print(format_table(["case", "tilesmith", "cuBLAS/eager", "Inductor", "ts err",
                            "cb err", "ind err", "tune", "config"], lines, left=(0, -2, -1)))
    for r in rows:
        tune = r.get("tune") or {}
        if tune.get("ran") and tune.get("rc") != 0:
            print(f"tune  {r['case']}: rc {tune['rc']}: {tune.get('note', '')}")
        if r.get("ind_status", "ok") not in ("ok", "skipped") and not not_run(r["status"]):
            print(f"inductor {r['case']}: {r['ind_status']}")
        if r.get("ind_graph_status"):
            print(f"inductor {r['case']} as a CUDA graph: {r['ind_graph_status']}")
        if r["status"] != "ok" and not not_run(r["status"]):
            print(f"status {r['case']}: {r['status']}")
    print()
    for r in rows:
        if not not_run(r["status"]):
            # Untuned: the default, or (the database holding other shapes) a nearby shape's winner.
            kind = {True: "tuned", False: "untuned", None: "?"}[r.get("tuned")]
            print(f"config {r['case']:<30} ({kind}): {r.get('config') or '-'}")


def noise_note(r):
    """The sides whose halves disagree by more than NOISY_SPREAD, for the status cell."""
    noisy = [f"{label} ±{r[key]:.0f}%" for key, label in
             (("ts_spread", "tilesmith"), ("cb_spread", "cuBLAS"), ("ind_spread", "Inductor"))
             if (r.get(key) or 0) > NOISY_SPREAD]
    return f"noisy: {', '.join(noisy)}" if noisy else ""


def print_table(rows):
    """The short table, then the geometric means: printed last."""
    missing = [r["case"] for r in rows if not_run(r["status"])]
    if missing:
        print(f"\nnot run: {len(missing)} case(s); to run them: "
              f"--cases '^({'|'.join(re.escape(name) for name in missing)})$'")
    lines = []
    for r in rows:
        derive(r)
        ind = fmt(r.get("x_inductor"), ".2f")
        if r.get("ind_ms") is None and r.get("ind_status", "skipped") != "ok":
            ind = "n/a" if r.get("ind_status", "").startswith("n/a") else "-"
        compile_s = fmt(r.get("ind_compile_s"), ".0f")
        lines.append([r["case"], r["shape"], r["layout"], fmt(r.get("ts_ms"), ".4f"),
                      fmt(r.get("ts_tflops"), ".1f"), fmt(r.get("pct_peak"), ".1f"),
                      fmt(r.get("x_cublas"), ".2f"), ind, fmt(r.get("x_floor"), ".2f"),
                      compile_s, ", ".join(filter(None, (r["status"][:60], noise_note(r))))])
    print()
    print("layout: storage of A then B, r row-major, c column-major (B c: x @ W.t())\n"
          "x cuBLAS, x Inductor: their ms / tilesmith ms (> 1: tilesmith faster; epilogue rows:"
          " eager torch in the cuBLAS column)\n"
          f"x floor (M <= {FLOOR_MAX_M}): tilesmith ms / ((A+B+C bytes) / measured copy"
          " bandwidth); ind s: Inductor compile seconds")
    print(format_table(["case", "shape", "layout", "ts ms", "TFLOP/s", "% peak", "x cuBLAS",
                        "x Inductor", "x floor", "ind s", "status"], lines, left=(0, 1, 2, -1)))
    graphed = [r for r in rows if r.get("ts_graph_ms")]
    if graphed:
        print(f"\nM <= {FLOOR_MAX_M} as CUDA graph replays (a graph of calls over input sets enough"
              " to leave each call's operands cold; no flush, no events between calls; the"
              " serving loop's timing):")
        print(format_table(
            ["case", "ts ms", "cuBLAS ms", "Inductor ms", "x cuBLAS", "x Inductor", "x floor",
             "sets x calls"],
            [[r["case"], fmt(r.get("ts_graph_ms"), ".4f"), fmt(r.get("cb_graph_ms"), ".4f"),
              fmt(r.get("ind_graph_ms"), ".4f"), fmt(r.get("x_cublas_graph"), ".2f"),
              fmt(r.get("x_inductor_graph"), ".2f"), fmt(r.get("x_floor_graph"), ".2f"),
              r.get("graph_shape") or "-"] for r in graphed]))
    done = [r for r in rows if not not_run(r["status"])]
    skipped = len(rows) - len(done)
    tail = f"; {skipped} case(s) not run" if skipped else ""
    for label, group in (("suite", [r for r in done if r["group"] != "epilogue"]),
                         ("epilogue", [r for r in done if r["group"] == "epilogue"])):
        if not group:
            continue
        ok = [r for r in group if r["status"] == "ok"]
        for column, name in (("x_cublas", "cuBLAS" if label == "suite" else "eager"),
                             ("x_inductor", "Inductor"), ("x_best", "the faster of the two")):
            values = [r[column] for r in ok if r.get(column)]
            if column != "x_cublas" and all(r.get("ind_status") == "skipped" for r in group):
                continue  # --skip-inductor
            g = geomean(values)
            noisy = sum(1 for r in ok if r.get(column) and noise_note(r))
            noisy_note = f", {noisy} with a noisy side" if noisy else ""
            print(f"geomean x {name:<8} ({label}: over {len(values)} verified of {len(group)}"
                  f" cases run{tail}{noisy_note}): {fmt(g, '.3f')}")


def clean_json(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # strict JSON has no NaN
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_json(v) for v in value]
    return value


def write_json(path, header, rows):
    """Written whole after every case (through a temporary file), so a run cut off still leaves
    every finished case behind."""
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "w") as f:
        json.dump(clean_json({"header": header, "rows": [derive(dict(r)) for r in rows]}), f,
                  indent=1)
    os.replace(temporary, path)


def merge(paths, json_out):
    """Joins the rows of several --json files: per case the row of the last file that ran it."""
    order = canonical_order()
    merged, headers = {}, []
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
            header, rows = data["header"], data["rows"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            mb.setup_error(f"cannot read {path}: {error}")
        headers.append((path, header))
        for row in rows:
            if row["case"] not in merged or not not_run(row["status"]):
                merged[row["case"]] = row
    for path, header in headers:
        print(f"{path}: {header.get('gpu')}, torch {header.get('torch')}, cuBLAS "
              f"{header.get('cublas')}, copy {fmt(header.get('copy_GBps'), '.0f')} GB/s, "
              f"part {header.get('part') or 'all'}, started {header.get('started')}")
    gpus = {header.get("gpu") for _, header in headers}
    if len(gpus) > 1:
        print(f"warning: the files come from different GPUs: {sorted(map(str, gpus))}")
    rows = sorted(merged.values(), key=lambda r: (order.get(r["case"], len(order)), r["case"]))
    if json_out:
        write_json(json_out, {"merged_from": [{"path": p, **h} for p, h in headers]}, rows)
    print_details(rows)
    print_table(rows)
    failed = [r for r in rows if not not_run(r["status"]) and r["status"] != "ok"]
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# Arguments


def parse_part(text):
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise argparse.ArgumentTypeError(f"bad --part {text!r}: want i/N with 1 <= i <= N")
    return int(match[1]), int(match[2])


def parse_regex(text):
    try:
        return re.compile(text)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"bad --cases regex {text!r}: {error}")


def parse_budget(text):
    if not re.fullmatch(r"all|[1-9]\d*|\d+(\.\d+)?s", text) or text in ("0s", "0.0s"):
        raise argparse.ArgumentTypeError(
            f"bad --tune-budget {text!r}: want N candidates, Ns seconds, or all")
    return text


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="examples:\n"
               "  python3 bench/matmul_suite.py --list --part 1/2\n"
               "  python3 bench/matmul_suite.py --part 1/2 --deadline 540 --json $OUT/p1.json\n"
               "  python3 bench/matmul_suite.py --cases '^(square|bmm)' --no-tune --skip-inductor\n"
               "  python3 bench/matmul_suite.py --merge p1.json p2.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=parse_regex, metavar="REGEX",
                   help="only the cases whose name matches (re.search; see --list)")
    p.add_argument("--part", type=parse_part, metavar="i/N",
                   help="the i-th of N round-robin slices of the (filtered) cases")
    p.add_argument("--epilogue", action="store_true",
                   help="add the fused bias/activation/residual cases (against eager and compiled "
                        "torch)")
    p.add_argument("--list", action="store_true", help="print the selected cases and exit")
    p.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16",
                   help="input and output type (default bf16); f32 is multiplied as tf32, by "
                        "tilesmith and by torch (allow_tf32), and checked against fp64")
    p.add_argument("--lib", default=os.path.join(mb.REPO, "build", "libtilesmith.so"))
    p.add_argument("--tilesmith", metavar="PATH",
                   help="the CLI for the tune step (default: tilesmith beside --lib)")
    p.add_argument("--db", default=os.environ.get("TILESMITH_DB"),
                   help="tuning database, for the runtime and the tune step (default: "
                        "$TILESMITH_DB, else the library default)")
    p.add_argument("--tune-budget", type=parse_budget, default="20s", metavar="N|Ns|all",
                   help="tune budget per case, model-guided strategy (default 20s); a case "
                        "whose winner is already in the database is not tuned again")
    p.add_argument("--no-tune", action="store_true", help="skip the tune step")
    p.add_argument("--force-tune", action="store_true",
                   help="tune even where the database has a winner (the sweep resumes; configs "
                        "already tried are skipped)")
    p.add_argument("--tune-log", metavar="FILE", help="append the tune steps' output here")
    p.add_argument("--skip-inductor", action="store_true", help="no torch.compile column")
    p.add_argument("--deadline", type=float, default=0, metavar="SECONDS",
                   help="start no case (and no tune step) that would likely end later than this "
                        "many seconds after start; the rest are reported 'not run' (default: none)")
    p.add_argument("--json", metavar="FILE", help="write header and rows (after every case)")
    p.add_argument("--merge", nargs="+", metavar="FILE",
                   help="print the combined table of these --json files and exit (no GPU needed;"
                        " with --json, also write the merged rows)")
    p.add_argument("--peak", type=float, metavar="TFLOPS",
                   help="dense tensor peak for '%% peak' (default: by GPU name, 989 on H100 SXM)")
    p.add_argument("--timing", choices=["rounds", "blocks"], default="rounds",
                   help="rounds (default): the three alternate rep by rep, so all run at the "
                        "same clocks; blocks: each times rep-ms of reps in turn, forward then "
                        "backward (the suite's method up to v17)")
    p.add_argument("--warmup-ms", type=float, default=None,
                   help="default 500 with --timing rounds (the clocks settle under the power "
                        "limit first), 25 with blocks")
    p.add_argument("--rep-ms", type=float, default=200.0)
    p.add_argument("--no-graph", action="store_true",
                   help=f"skip the second timing of the M <= {FLOOR_MAX_M} cases as CUDA graph "
                        "replays over rotating inputs")
    args = p.parse_args(argv)
    if args.warmup_ms is None:
        args.warmup_ms = 500.0 if args.timing == "rounds" else 25.0
    if args.no_tune and args.force_tune:
        p.error("--no-tune and --force-tune exclude each other")
    if args.tilesmith is None:
        args.tilesmith = os.path.join(os.path.dirname(os.path.abspath(args.lib)), "tilesmith")
    return args


# ---------------------------------------------------------------------------------------------
# The GPU run


class Interrupted(Exception):
    pass


def on_sigterm(signum, frame):
    signal.signal(signum, signal.SIG_IGN)  # once: a second one must not cut the report short
    raise Interrupted(f"signal {signum}")


def inductor_gemm_backends():
    """What Inductor's max-autotune picks GEMMs among (ATen is cuBLAS), for the header."""
    try:
        import torch._inductor.config
        return str(torch._inductor.config.max_autotune_gemm_backends)
    except Exception:  # a torch without it, or one that moved it
        return None


def query_config(lib, rt, desc):
    buf, tuned = ctypes.create_string_buffer(1024), ctypes.c_int(0)
    mb.check(lib, lib.tilesmith_matmul_ex_config(rt, ctypes.byref(desc), buf, len(buf),
                                                 ctypes.byref(tuned)),
             "tilesmith_matmul_ex_config")
    return buf.value.decode(errors="replace"), bool(tuned.value)


def run_tune(args, case, timeout_s):
    """One `tilesmith tune` of this case; returns the row's tune record. SIGINT on timeout (the
    CLI stops between two database writes and keeps what it found)."""
    command = [args.tilesmith, "tune", "--op", "matmul", "--dtype", args.dtype,
               "--shape", case.shape] + case.tune_options()
    if args.tune_budget != "all":
        # The model-guided order: within 2% of the exhaustive best in 9-15% of the trials,
        # where random leaves up to 12.8% at a quarter (docs/perf/tuner.md v3.1).
        command += ["--budget", args.tune_budget, "--strategy", "model"]
    if args.db:
        command += ["--db", args.db]
    start = time.perf_counter()
    log = open(args.tune_log, "a") if args.tune_log else None
    if log:
        log.write(f"\n== {case.name}: {' '.join(command)}\n")
        log.flush()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace")
    # A watchdog rather than a check per output line: the CLI can be silent for long (compiles).
    timed_out = threading.Event()
    def stop():
        timed_out.set()
        process.send_signal(signal.SIGINT)
    watchdogs = [threading.Timer(timeout_s, stop), threading.Timer(timeout_s + 30, process.kill)] \
        if timeout_s else []
    for watchdog in watchdogs:
        watchdog.daemon = True
        watchdog.start()
    lines = []
    try:
        for line in process.stdout:  # the CLI prints a progress line every ~10 candidates
            lines.append(line.rstrip("\n"))
            if log:
                log.write(line)
        process.wait()
    finally:
        for watchdog in watchdogs:
            watchdog.cancel()
        if process.poll() is None:  # interrupted ourselves: stop it cleanly, then for good
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if log:
            log.close()
    seconds = time.perf_counter() - start
    # The winner's two lines (config, then its time), else the last error or the last line.
    winner = [" ".join(" ".join(lines[i:i + 2]).split())
              for i, l in enumerate(lines) if l.strip().startswith("winner")]
    errors = [l.strip() for l in lines if "error" in l.lower()]
    last = next((l.strip() for l in reversed(lines) if l.strip()), "")
    note = (winner[-1] if winner else errors[-1] if errors else last)[:200]
    if timed_out.is_set():
        note = f"stopped after {timeout_s:.0f} s: {note}"
    return {"ran": True, "rc": process.returncode, "seconds": seconds, "note": note,
            "command": " ".join(command)}


def main(argv=None):
    args = parse_args(argv)
    if args.merge:
        return merge(args.merge, args.json)
    cases = select_cases(args)
    if args.list:
        total = len(suite_cases() + (epilogue_cases() if args.epilogue else []))
        print(f"{len(cases)} of {total} cases" + (f", part {args.part[0]}/{args.part[1]}"
                                                   if args.part else ""))
        for case in cases:
            print(f"  {case.name:<30} {case.shape:>20}  {case.layout:<18} "
                  f"tune: --shape {case.shape} {' '.join(case.tune_options())}".rstrip())
        return 0
    if not cases:
        mb.setup_error("no case selected (see --list; the epi.* cases need --epilogue)")
    started = time.time()
    try:
        import torch, triton
        import torch._dynamo  # reset() between cases
        import torch.nn.functional as F
    except Exception as error:  # ImportError, or a broken install failing at import
        mb.setup_error(f"{error} (this benchmark needs torch and triton)")
    if not torch.cuda.is_available():
        mb.setup_error("torch sees no CUDA device")
    lib = mb.load_lib(args.lib)
    if not args.no_tune and not os.access(args.tilesmith, os.X_OK):
        mb.setup_error(f"{args.tilesmith} not found or not executable (pass --tilesmith, or "
                       "--no-tune)")
    try:
        rt = mb.create_runtime(lib, args.db)
    except RuntimeError as error:
        mb.setup_error(str(error))

    dt = mb.torch_dtype(torch, args.dtype)
    code = mb.DTYPE_CODES[args.dtype]
    tf32, tolerance = mb.compare_inputs(torch, args.dtype)
    bench = mb.make_bench(args.warmup_ms, args.rep_ms)
    rounds = mb.make_rounds(args.warmup_ms, args.rep_ms)
    copy_gbs = mb.copy_bandwidth_gbs(bench)
    torch.matmul(torch.ones(8, 8, device="cuda", dtype=dt),
                 torch.ones(8, 8, device="cuda", dtype=dt))  # so cuBLAS is loaded to ask
    # What the flush costs the timed kernel: cuBLAS on a decode shape (x @ W.t(), 1x4096x4096)
    # after a flush that writes (triton's do_bench) and after one that reads (this suite's).
    x = torch.randn(1, 4096, device="cuda", dtype=dt)
    w = torch.randn(4096, 4096, device="cuda", dtype=dt)
    flush_check = {kind: mb.make_bench(args.warmup_ms, args.rep_ms, flush=kind)(lambda: x @ w.t())
                   for kind in ("write", "read")}
    x = w = None
    gpu = torch.cuda.get_device_name()
    peak = args.peak or mb.peak_tflops(gpu)
    if tf32 and not args.peak and peak:
        peak /= 2  # dense tf32 runs at half the 16-bit rate
    header = {
        "gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
        "triton": triton.__version__, "cublas": mb.cublas_version(), "copy_GBps": copy_gbs,
        "peak_TFLOPs": peak, "dtype": args.dtype,
        "db": args.db or "(library default)",
        "tune": "off" if args.no_tune else f"{args.tune_budget} model-guided per untuned case"
                + (" (forced)" if args.force_tune else ""),
        "inductor": "skipped" if args.skip_inductor else f"torch.compile mode={INDUCTOR_MODE},"
                    " dynamic=False, torch._dynamo.reset() per case",
        "inductor_gemm_backends": inductor_gemm_backends(),
        "bf16_reduced_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "timing": (f"median of event-timed reps, the implementations alternating rep by rep "
                   f"(warmup {args.warmup_ms} ms, 2 x {args.rep_ms} ms of reps each), L2 "
                   "flushed by reading 256 MB before each rep" if args.timing == "rounds" else
                   f"median of two medians of event-timed reps (warmup {args.warmup_ms} ms, "
                   f"rep {args.rep_ms} ms), L2 flushed by reading 256 MB, three implementations "
                   "interleaved"),
        "flush_check": f"cuBLAS 1x4096x4096 x@W.t(): {flush_check['write']:.4f} ms after a "
                       f"writing flush, {flush_check['read']:.4f} ms after a reading one",
        "part": f"{args.part[0]}/{args.part[1]}" if args.part else None,
        "cases": args.cases.pattern if args.cases else None,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
    }
    for key, value in header.items():
        shown = f"{value:.1f}" if isinstance(value, float) else value
        print(f"{key:>22}: {'-' if shown is None else shown}")
    sys.stdout.flush()

    stream = torch.cuda.current_stream().cuda_stream
    acts = {"none": None, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}
    in_size = out_size = dt.itemsize
    rows = []
    for case in cases:
        rows.append(derive({
            "case": case.name, "group": case.group, "shape": case.shape, "layout": case.layout,
            "batch": case.batch, "m": case.m, "n": case.n, "k": case.k,
            "a_layout": "col" if case.a_col else "row", "b_layout": "col" if case.b_col else "row",
            "epilogue": case.epilogue, "flops": case.flops(),
            "min_bytes": case.min_bytes(in_size, out_size), "copy_GBps": copy_gbs,
            "peak_TFLOPs": peak, "baseline": "torch.matmul" if not case.epilogue else "eager torch",
            "tune": None, "tuned": None, "config": "",
            "ts_ms": None, "ts_spread": None, "ts_err": None,
            "cb_ms": None, "cb_spread": None, "cb_err": None,
            "ind_ms": None, "ind_spread": None, "ind_err": None, "ind_compile_s": None,
            "ind_status": "skipped" if args.skip_inductor else "not run",
            "status": "not run (pending)", "seconds": None}))

    def save():
        if args.json:
            write_json(args.json, header, rows)

    def torch_fn(case):
        """A fresh eager function of this case: mm, bias, activation, residual (unfused)."""
        mm, act = (torch.bmm if case.batch > 1 else torch.matmul), acts[case.act]
        def fn(a, b, bias, residual):
            c = mm(a, b)
            if bias is not None:
                c = c + bias
            if act is not None:
                c = act(c)
            if residual is not None:
                c = c + residual
            return c
        return fn

    def rel_err(out, ref):
        return float(torch.linalg.vector_norm(out.float() - ref) / torch.linalg.vector_norm(ref))

    def lead_dims(case):
        return (case.batch,) if case.batch > 1 else ()

    def operands(case):
        """A and B of the case, stored and as torch multiplies them: random normals (zeros would
        hide wrong indexing), A scaled by 1/sqrt(K) so that C is ~N(0, 1) and an activation
        sees both of its sides. A column-major operand is the transposed view of its storage,
        as torch users write it."""
        def randn(*shape, scale=1.0):
            t = torch.randn(*lead_dims(case), *shape, device="cuda", dtype=dt)
            return t.mul_(scale) if scale != 1.0 else t
        a_store = randn(*((case.k, case.m) if case.a_col else (case.m, case.k)),
                        scale=case.k ** -0.5)
        b_store = randn(*((case.n, case.k) if case.b_col else (case.k, case.n)))
        a = a_store.transpose(-1, -2) if case.a_col else a_store
        b = b_store.transpose(-1, -2) if case.b_col else b_store
        return a_store, b_store, a, b

    def poisoned_output(case):
        """C filled with NaN: an element the kernel never writes stays NaN and is caught."""
        return torch.full((*lead_dims(case), case.m, case.n), float("nan"), device="cuda",
                          dtype=dt)

    def ts_desc(case, a_store, b_store, c, bias, residual):
        return MatmulDesc(a_store.data_ptr(), b_store.data_ptr(), c.data_ptr(),
                          case.batch, case.m, case.n, case.k, code, code,
                          COLUMN_MAJOR if case.a_col else ROW_MAJOR,
                          COLUMN_MAJOR if case.b_col else ROW_MAJOR,
                          bias.data_ptr() if bias is not None else None,
                          residual.data_ptr() if residual is not None else None,
                          ACTIVATIONS[case.act])

    def reference(case, a, b, bias, residual):
        """C in fp32 (fp64 products for tf32's inputs), the epilogue applied."""
        ref = (torch.matmul(a.double(), b.double()).float() if tf32
               else torch.matmul(a.float(), b.float()))
        if bias is not None:
            ref += bias.float()
        if acts[case.act] is not None:
            ref = acts[case.act](ref)
        if residual is not None:
            ref += residual.float()
        return ref

    def time_as_graphs(case, row, eager, compiled, bias, residual):
        """The case's calls again, as CUDA graph replays over rotating input sets
        (mb.make_graph_rounds), tilesmith's output of every set verified afterwards. Inductor's
        column is n/a where its function cannot be captured."""
        sets = mb.rotation_sets(dt.itemsize * case.batch * (case.m * case.k + case.k * case.n))
        calls = mb.graph_calls(sets)
        inputs = [operands(case) for _ in range(sets)]
        outputs = [poisoned_output(case) for _ in range(sets)]
        descs = [ctypes.byref(ts_desc(case, a_store, b_store, c, bias, residual))
                 for (a_store, b_store, _, _), c in zip(inputs, outputs)]
        def run_ts(i):  # on the current stream: the capture's while the graph is made
            mb.check(lib, lib.tilesmith_matmul_ex(rt, descs[i % sets],
                                                  torch.cuda.current_stream().cuda_stream),
                     "tilesmith_matmul_ex (graph)")
        impls = {"ts": run_ts, "cb": lambda i: eager(*inputs[i % sets][2:], bias, residual)}
        timer = mb.make_graph_rounds(calls)
        times = None
        if compiled is not None:
            try:
                times = timer({**impls, "ind": lambda i: compiled(*inputs[i % sets][2:], bias,
                                                                  residual)})
            except Interrupted:
                raise
            except Exception as error:
                first = (str(error).strip().splitlines() or [""])[0]
                row["ind_graph_status"] = f"n/a: {type(error).__name__}: {first}"[:200]
                torch.cuda.synchronize()
        if times is None:
            times = timer(impls)
        worst = 0.0
        for (_, _, a, b), c in zip(inputs, outputs):
            bad = int((~torch.isfinite(c)).sum())
            worst = max(worst, float("inf") if bad else rel_err(c, reference(case, a, b, bias,
                                                                             residual)))
        row["ts_graph_err"] = worst
        if not worst <= tolerance and row["status"] == "ok":
            row["status"] = f"FAIL graph err {worst:.1e} > {tolerance:g}"
        for key, (ms, spread) in times.items():
            row[f"{key}_graph_ms"], row[f"{key}_graph_spread"] = ms, spread
        row["graph_shape"] = f"{sets}x{calls}"

    def time_side_by_side(impls, index, row):
        """{key: (ms, spread %)} for impls [(key, fn)], Inductor's last. An Inductor call that
        fails while timed is reported n/a and the others are timed without it."""
        if args.timing == "rounds":
            try:
                return rounds(dict(impls))
            except Interrupted:
                raise
            except Exception as error:
                if impls[-1][0] != "ind":
                    raise
                row["ind_status"] = f"n/a: timing failed: {error}"[:200]
                return rounds(dict(impls[:-1]))
        # Blocks: the order rotates from case to case and runs forward then backward, so that a
        # drift that is linear in time hits all three alike; two medians each.
        shift = index % len(impls)
        order = impls[shift:] + impls[:shift]
        times = {key: [] for key, _ in impls}
        for key, fn in order + order[::-1]:
            if times[key] is None:
                continue
            try:
                times[key].append(bench(fn))
            except Interrupted:
                raise
            except Exception as error:
                if key != "ind":
                    raise
                row["ind_status"] = f"n/a: timing failed: {error}"[:200]
                times["ind"] = None
        return {key: ((v[0] + v[1]) / 2, abs(v[0] - v[1]) / ((v[0] + v[1]) / 2) * 100)
                for key, v in times.items() if v and len(v) == 2}

    save()
    signal.signal(signal.SIGTERM, on_sigterm)  # a cut-off run still prints what it measured
    failed, stop_reason, longest = False, None, 0.0
    try:
        for index, (case, row) in enumerate(zip(cases, rows)):
            elapsed = time.time() - started
            if args.deadline and index > 0 and elapsed + longest > args.deadline:
                stop_reason = f"deadline {args.deadline:.0f} s"
            if stop_reason:
                row["status"] = f"not run ({stop_reason})"
                continue
            case_start = time.time()
            row["status"] = "ok"
            print(f"[{index + 1}/{len(cases)}] {case.name} {case.shape} {case.layout}", flush=True)
            tensors = {}
            try:
                a_store, b_store, a, b = operands(case)
                bias = torch.randn(case.n, device="cuda", dtype=dt) if case.bias else None
                residual = (torch.randn(*lead_dims(case), case.m, case.n, device="cuda", dtype=dt)
                            if case.residual else None)
                c = poisoned_output(case)
                tensors = {"a": a_store, "b": b_store, "c": c, "bias": bias, "residual": residual}
                desc = ts_desc(case, a_store, b_store, c, bias, residual)
                # The config, then the tune step where the database has no winner yet (the
                # config query needs bias and residual present: they select the kernel). The
                # runtime is made anew after a sweep, so that no answer it remembered from
                # before stays in use.
                row["config"], row["tuned"] = query_config(lib, rt, desc)
                if args.no_tune:
                    row["tune"] = {"ran": False, "note": "off"}
                elif row["tuned"] and not args.force_tune:
                    row["tune"] = {"ran": False, "note": "in db"}
                else:
                    timeout = None
                    if args.tune_budget.endswith("s"):
                        timeout = 2 * float(args.tune_budget[:-1]) + 120
                    if args.deadline:  # leave room for this case's compile and timing
                        left = args.deadline - (time.time() - started) - max(longest, 60)
                        timeout = min(timeout or left, left)
                    if timeout is not None and timeout < 15:
                        row["tune"] = {"ran": False, "note": "skipped (deadline)"}
                    else:
                        row["tune"] = run_tune(args, case, timeout)
                        print(f"    tune: {row['tune']['seconds']:.0f} s, rc {row['tune']['rc']}: "
                              f"{row['tune']['note']}", flush=True)
                        lib.tilesmith_runtime_destroy(rt)
                        rt = None
                        rt = mb.create_runtime(lib, args.db)
                        row["config"], row["tuned"] = query_config(lib, rt, desc)

                desc_ref = ctypes.byref(desc)
                def run_ts():
                    mb.check(lib, lib.tilesmith_matmul_ex(rt, desc_ref, stream),
                             "tilesmith_matmul_ex")

                # fp32 reference, then tilesmith's first call (lookup / NVRTC compile, untimed).
                ref = reference(case, a, b, bias, residual)
                run_ts()
                torch.cuda.synchronize()
                bad = int((~torch.isfinite(c)).sum())
                row["ts_err"] = rel_err(c, ref)
                if bad:
                    row["status"] = f"FAIL {bad} non-finite"
                elif not row["ts_err"] <= tolerance:
                    row["status"] = f"FAIL err {row['ts_err']:.1e} > {tolerance:g}"
                eager = torch_fn(case)
                row["cb_err"] = rel_err(eager(a, b, bias, residual), ref)

                # Inductor: compiled for this case alone (reset, static shapes and strides).
                compiled = None
                if not args.skip_inductor:
                    try:
                        torch._dynamo.reset()
                        t0 = time.perf_counter()
                        compiled = torch.compile(torch_fn(case), mode=INDUCTOR_MODE, dynamic=False)
                        out = compiled(a, b, bias, residual)
                        torch.cuda.synchronize()
                        row["ind_compile_s"] = time.perf_counter() - t0
                        row["ind_err"] = rel_err(out, ref)
                        del out
                        row["ind_status"] = "ok"
                    except Interrupted:
                        raise
                    except Exception as error:  # reported as n/a; the case goes on without it
                        first = (str(error).strip().splitlines() or [""])[0]
                        row["ind_status"] = f"n/a: {type(error).__name__}: {first}"[:200]
                        compiled = None
                del ref
                torch.cuda.empty_cache()

                impls = [("ts", run_ts), ("cb", lambda: eager(a, b, bias, residual))]
                if compiled is not None:
                    impls.append(("ind", lambda: compiled(a, b, bias, residual)))
                for key, (ms, spread) in time_side_by_side(impls, index, row).items():
                    row[f"{key}_ms"], row[f"{key}_spread"] = ms, spread
                if case.m <= FLOOR_MAX_M and not args.no_graph:
                    time_as_graphs(case, row, eager, compiled, bias, residual)
            except (Interrupted, KeyboardInterrupt) as why:
                stop_reason = f"interrupted{': ' + str(why) if str(why) else ''}"
                row["status"] = f"not run ({stop_reason})"
            except Exception as error:  # report it and go on with the other cases
                row["status"] = f"ERROR {error}".replace("\n", " ")[:200]
                if rt is None:  # the runtime could not be made again: nothing more can run
                    stop_reason = "no runtime"
            finally:
                tensors.clear()
                a = b = c = bias = residual = a_store = b_store = compiled = eager = None
                try:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                except Exception as error:  # a kernel fault poisons the context for all that follow
                    stop_reason = stop_reason or f"CUDA context lost: {str(error).splitlines()[0]}"
                    if row["status"] == "ok":
                        row["status"] = f"ERROR {stop_reason}"
            failed |= not not_run(row["status"]) and row["status"] != "ok"
            row["seconds"] = time.time() - case_start
            longest = max(longest, row["seconds"])
            derive(row)
            if not not_run(row["status"]):
                print(f"    {row['status']}: ts {fmt(row['ts_ms'], '.4f')} ms, cuBLAS "
                      f"{fmt(row['cb_ms'], '.4f')} ms, Inductor {fmt(row['ind_ms'], '.4f')} ms "
                      f"(compile {fmt(row['ind_compile_s'], '.0f')} s); case "
                      f"{row['seconds']:.0f} s", flush=True)
            save()
    except (Interrupted, KeyboardInterrupt) as why:  # between two cases' try blocks
        for row in rows:
            if row["status"] == "not run (pending)":
                row["status"] = f"not run (interrupted{': ' + str(why) if str(why) else ''})"
    save()
    if rt is not None:
        lib.tilesmith_runtime_destroy(rt)
    torch._dynamo.reset()

    print_details(rows)
    print_table(rows)
    sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
