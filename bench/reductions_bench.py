#!/usr/bin/env python3
"""Benchmark tilesmith's row ops (softmax, layernorm, rmsnorm, the fused norm + activation +
residual, and the backward of the first three) against torch eager and torch.compile, in one
process, side by side.

usage: reductions_bench.py [--ops softmax,layernorm,...,softmax_backward,...] [--dtypes bf16,f32]
                           [--shapes RxC,...]
                           [--tune-budget 6s|N|all|none] [--skip-compile] [--json FILE]
                           [--lib PATH] [--tilesmith PATH] [--db PATH]

The backward ops are timed against torch's autograd backward of the forward (eager: the
backward graph alone, retained) and against torch.compile of the same formulas tilesmith
computes, in fp32 inside; dweight and dbias are always computed. Each case is first tuned (`tilesmith tune`, unless --tune-budget none), then verified against
torch in fp32 (NaN-poisoned output, relative Frobenius error), then timed with L2 flushed
(CUDA events, median; L2 flushed by reading a 256 MB buffer: matmul_bench.make_bench). GB/s counts each tensor read once and written once; the copy
bandwidth is measured in the same run. Exit status: 0 all verified, 1 a verification failure,
2 setup problem.
"""
import argparse, ctypes, json, math, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matmul_bench as mb  # noqa: E402  (the C library loader, the timer, the copy bandwidth)

mb.PROG = "reductions_bench"
REPO = mb.REPO
OPS = {"softmax": 0, "layernorm": 1, "rmsnorm": 2, "layernorm_act_residual": 3,
       "rmsnorm_act_residual": 4}  # enum tilesmith_row_op
BACKWARD_OPS = {"softmax_backward": 0, "layernorm_backward": 1, "rmsnorm_backward": 2}
ACT_GELU = 2
SHAPES = "65536x256,131072x1024,32768x4096,8192x8192,4096x32768,1024x131072"
TOLERANCE = {"bf16": 1e-2, "f16": 2e-3, "f32": 5e-4}


RowsDesc, RowsBackwardDesc = mb._capi.RowsDesc, mb._capi.RowsBackwardDesc


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", default="softmax,layernorm,rmsnorm,softmax_backward,"
                                    "layernorm_backward,rmsnorm_backward")
    p.add_argument("--fused", default="32768x4096,8192x8192",
                   help="shapes for layernorm/rmsnorm_act_residual (gelu) in bf16; '' for none")
    p.add_argument("--dtypes", default="bf16,f32")
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--tune-budget", default="6s", help="per case: Ns, N candidates, all, none")
    p.add_argument("--skip-compile", action="store_true", help="no torch.compile column")
    p.add_argument("--multi-sum", default="2000:1000-300000",
                   help="COUNT:MIN-MAX: multi_sum over COUNT f32 tensors of lengths uniform in "
                        "MIN..MAX, beside a Python loop of t.sum() and torch._foreach_norm; '' for "
                        "none")
    p.add_argument("--json")
    p.add_argument("--tune-log")
    p.add_argument("--lib", default=os.path.join(REPO, "build", "libtilesmith.so"))
    p.add_argument("--tilesmith", default=os.path.join(REPO, "build", "tilesmith"))
    p.add_argument("--db", default=os.environ.get("TILESMITH_DB"))
    p.add_argument("--warmup-ms", type=float, default=10.0)
    p.add_argument("--rep-ms", type=float, default=100.0)
    return p.parse_args(argv)


def cases(args):
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    out = [(op, dtype, r, c) for op in args.ops.split(",") if op for dtype in args.dtypes.split(",")
           for (r, c) in shapes]
    for s in filter(None, args.fused.split(",")):
        r, c = (int(v) for v in s.split("x"))
        out += [("layernorm_act_residual", "bf16", r, c), ("rmsnorm_act_residual", "bf16", r, c)]
    return out


def tune(args, op, dtype, shape, log):
    options = ["act=gelu"] if op.endswith("act_residual") else []
    return mb.tune_with_cli(args, op, dtype, shape, options, log)


def time_beside_torch(row, bench, args, torch, ts, eager, to_compile):
    """tilesmith's call, torch eager, and torch.compile of `to_compile` (its compile time too)."""
    row["ts_ms"] = bench(ts)
    row["eager_ms"] = bench(eager)
    if not args.skip_compile:
        compiled = torch.compile(to_compile, dynamic=False)
        start = time.perf_counter()
        compiled()
        torch.cuda.synchronize()
        row["compile_s"] = time.perf_counter() - start
        row["compile_ms"] = bench(compiled)


def backward_case(row, lib, rt, stream, bench, args, torch, F, dt, dtype, r, c):
    """One backward case: fills `row`; returns True when tilesmith's result is wrong."""
    op = row["op"]
    softmax, layer = op == "softmax_backward", op == "layernorm_backward"
    x = torch.randn(r, c, device="cuda", dtype=dt)
    dy = torch.randn(r, c, device="cuda", dtype=dt)
    w = None if softmax else torch.randn(c, device="cuda", dtype=dt)
    b = torch.randn(c, device="cuda", dtype=dt) if layer else None
    # The forward's tensors tilesmith reads: softmax's y, the norms' mean and rstd (fp32).
    xf = x.float()
    mean = xf.mean(-1, keepdim=True) if layer else None
    var = xf.var(-1, unbiased=False, keepdim=True) if layer else xf.pow(2).mean(-1, keepdim=True)
    rstd = None if softmax else torch.rsqrt(var + 1e-5)
    y = torch.softmax(x, -1) if softmax else None
    first = y if softmax else x
    dx = torch.full((r, c), float("nan"), device="cuda", dtype=dt)
    dw = None if softmax else torch.full((c,), float("nan"), device="cuda", dtype=dt)
    db = torch.full((c,), float("nan"), device="cuda", dtype=dt) if layer else None
    ptr = lambda t: t.data_ptr() if t is not None else None
    desc = RowsBackwardDesc(op=BACKWARD_OPS[op], x=first.data_ptr(), dy=dy.data_ptr(),
                            dx=dx.data_ptr(), rows=r, cols=c, dtype=mb.DTYPE_CODES[dtype],
                            out_dtype=mb.DTYPE_CODES[dtype], weight=ptr(w), mean=ptr(mean),
                            rstd=ptr(rstd), dweight=ptr(dw), dbias=ptr(db))
    buf, tuned = ctypes.create_string_buffer(512), ctypes.c_int(0)
    mb.check(lib, lib.tilesmith_rows_backward_config(rt, ctypes.byref(desc), buf, len(buf),
                                                     ctypes.byref(tuned)),
             "tilesmith_rows_backward_config")
    row["config"], row["tuned"] = buf.value.decode(), bool(tuned.value)

    def ts():
        mb.check(lib, lib.tilesmith_rows_backward(rt, ctypes.byref(desc), stream),
                 "tilesmith_rows_backward")

    def formulas(first=first, dy=dy, w=w, mean=mean, rstd=rstd):
        """What tilesmith computes, in fp32 inside (torch.compile's input, and the reference)."""
        a, g = first.float(), dy.float()
        if softmax:
            return ((a * (g - (a * g).sum(-1, keepdim=True))).to(dt),)
        xhat = (a - mean) * rstd if layer else a * rstd
        gw = g * w.float()
        centred = gw - gw.mean(-1, keepdim=True) if layer else gw
        out = [(rstd * (centred - xhat * (gw * xhat).mean(-1, keepdim=True))).to(dt),
               (g * xhat).sum(0).to(dt)]
        if layer:
            out.append(g.sum(0).to(dt))
        return tuple(out)

    # Eager: torch's own backward of its forward, the graph built once and kept.
    leaf = x.detach().requires_grad_()
    params = [t.detach().requires_grad_() for t in (w, b) if t is not None]
    out = (torch.softmax(leaf, -1) if softmax else
           F.layer_norm(leaf, (c,), params[0], params[1], 1e-5) if layer else
           F.rms_norm(leaf, (c,), params[0], 1e-5))

    def eager():
        return torch.autograd.grad(out, [leaf] + params, dy, retain_graph=True)

    ts()
    torch.cuda.synchronize()
    expected = formulas()
    got = [t for t in (dx, dw, db) if t is not None]
    unwritten = sum(int(torch.isnan(t).sum()) for t in got)
    row["err"] = max(float((t.float() - e.float()).norm() / e.float().norm())
                     for t, e in zip(got, expected))
    wrong = bool(unwritten) or not row["err"] <= TOLERANCE[dtype]
    if wrong:
        row["status"] = f"WRONG ({unwritten} unwritten)"
    del expected
    time_beside_torch(row, bench, args, torch, ts, eager, formulas)
    tensors = [first, dy, dx] + [t for t in (w, mean, rstd, dw, db) if t is not None]
    row["bytes"] = sum(t.numel() * t.element_size() for t in tensors)
    return wrong


def multi_sum_case(spec, lib, rt, stream, bench, args, torch, log):
    """multi_sum over a table of f32 tensors beside torch; returns the row (verified or not)."""
    count, span = spec.split(":")
    count, (low, high) = int(count), (int(v) for v in span.split("-"))
    gen = torch.Generator().manual_seed(1)
    lengths = torch.randint(low, high + 1, (count,), generator=gen).tolist()
    tensors = [torch.randn(n, device="cuda") for n in lengths]
    total = sum(lengths)
    bucket = 1 << max(0, math.ceil(math.log2(-(-total // count))))
    row = {"op": "multi_sum", "dtype": "f32", "shape": f"{count}x{bucket}", "status": "ok",
           "tune": tune(args, "multi_sum", "f32", f"{count}x{bucket}", log)}
    table = torch.tensor([v for t in tensors for v in (t.data_ptr(), t.numel())],
                         dtype=torch.int64, device="cuda")
    out = torch.full((count,), float("nan"), device="cuda")

    def ts():
        mb.check(lib, lib.tilesmith_multi_sum(rt, table.data_ptr(), count, total,
                                              mb.DTYPE_CODES["f32"], mb.DTYPE_CODES["f32"],
                                              out.data_ptr(), 0, stream), "tilesmith_multi_sum")

    ts()
    torch.cuda.synchronize()
    expected = torch.stack([t.double().sum() for t in tensors])
    row["err"] = float((out.double() - expected).norm() / expected.norm())
    if torch.isnan(out).any() or not row["err"] <= TOLERANCE["f32"]:
        row["status"] = "WRONG"
    row["ts_ms"] = bench(ts)
    row["loop_ms"] = bench(lambda: [t.sum() for t in tensors])
    row["foreach_ms"] = bench(lambda: torch._foreach_norm(tensors, 1))
    row["bytes"] = total * 4 + count * 20
    return row


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch, triton
        import torch.nn.functional as F
    except Exception as error:
        mb.setup_error(f"{error} (this benchmark needs torch and triton)")
    if not torch.cuda.is_available():
        mb.setup_error("torch sees no CUDA device")
    lib = mb.load_lib(args.lib)
    try:
        rt = mb.create_runtime(lib, args.db)
    except RuntimeError as error:
        mb.setup_error(str(error))
    torch._dynamo.config.cache_size_limit = 1024
    torch.manual_seed(0)
    bench = mb.make_bench(args.warmup_ms, args.rep_ms)
    copy_gbs = mb.copy_bandwidth_gbs(bench)
    header = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": triton.__version__, "copy_GBps": copy_gbs,
              "timing": f"median of event-timed reps (warmup {args.warmup_ms} ms, rep {args.rep_ms} ms), "
                        "L2 flushed", "tune": args.tune_budget}
    for key, value in header.items():
        print(f"{key:>10}: {value:.0f}" if isinstance(value, float) else f"{key:>10}: {value}")
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    codes = mb.DTYPE_CODES
    stream = torch.cuda.current_stream().cuda_stream
    log = open(args.tune_log, "a") if args.tune_log else None
    rows, failed = [], False
    for op, dtype, r, c in cases(args):
        shape = f"{r}x{c}"
        row = {"op": op, "dtype": dtype, "shape": shape, "status": "ok"}
        rows.append(row)
        try:
            row["tune"] = tune(args, op, dtype, shape, log)
            dt = tdt[dtype]
            if op in BACKWARD_OPS:
                failed |= backward_case(row, lib, rt, stream, bench, args, torch, F, dt, dtype,
                                        r, c)
            else:
                x = torch.randn(r, c, device="cuda", dtype=dt)
                norm = op != "softmax"
                w = torch.randn(c, device="cuda", dtype=dt) if norm else None
                b = torch.randn(c, device="cuda", dtype=dt) if op.startswith("layernorm") else None
                fused = op.endswith("act_residual")
                res = torch.randn(r, c, device="cuda", dtype=dt) if fused else None
                y = torch.full((r, c), float("nan"), device="cuda", dtype=dt)
                desc = RowsDesc(op=OPS[op], x=x.data_ptr(), y=y.data_ptr(), rows=r, cols=c,
                                dtype=codes[dtype], out_dtype=codes[dtype],
                                weight=w.data_ptr() if w is not None else None,
                                bias=b.data_ptr() if b is not None else None,
                                residual=res.data_ptr() if res is not None else None,
                                activation=ACT_GELU if fused else 0, epsilon=1e-5)
                buf, tuned = ctypes.create_string_buffer(512), ctypes.c_int(0)
                mb.check(lib, lib.tilesmith_rows_config(rt, ctypes.byref(desc), buf, len(buf),
                                                        ctypes.byref(tuned)), "tilesmith_rows_config")
                row["config"], row["tuned"] = buf.value.decode(), bool(tuned.value)

                def ts():
                    mb.check(lib, lib.tilesmith_rows(rt, ctypes.byref(desc), stream), "tilesmith_rows")

                def eager(x=x, w=w, b=b, res=res):
                    if op == "softmax":
                        return torch.softmax(x, -1)
                    out = (F.layer_norm(x, (c,), w, b, 1e-5) if op.startswith("layernorm")
                           else F.rms_norm(x, (c,), w, 1e-5))
                    return F.gelu(out) + res if fused else out

                ts()
                torch.cuda.synchronize()
                xf = x.float()
                ref = (torch.softmax(xf, -1) if op == "softmax" else
                       F.layer_norm(xf, (c,), w.float(), b.float() if b is not None else None, 1e-5)
                       if op.startswith("layernorm") else F.rms_norm(xf, (c,), w.float(), 1e-5))
                if fused:
                    ref = F.gelu(ref) + res.float()
                unwritten = int(torch.isnan(y).sum())
                row["err"] = float((y.float() - ref).norm() / ref.norm())
                if unwritten or not row["err"] <= TOLERANCE[dtype]:
                    row["status"] = f"WRONG ({unwritten} unwritten)"
                    failed = True
                del xf, ref
                time_beside_torch(row, bench, args, torch, ts, eager, eager)
                tensors = [x, y] + [t for t in (w, b, res) if t is not None]
                row["bytes"] = sum(t.numel() * t.element_size() for t in tensors)
        except Exception as error:  # a setup or launch failure of one case: say so, go on
            row["status"] = f"error: {str(error)[:160]}"
            failed = True
        print(f"  {op:>22} {dtype:>4} {shape:>12}: {row.get('status')} "
              f"ts {row.get('ts_ms', float('nan')):.4f} ms, eager {row.get('eager_ms', float('nan')):.4f}, "
              f"compile {row.get('compile_ms', float('nan')):.4f}", flush=True)
        torch.cuda.empty_cache()

    rows_sums = None
    if args.multi_sum:
        try:
            rows_sums = multi_sum_case(args.multi_sum, lib, rt, stream, bench, args, torch, log)
        except Exception as error:
            rows_sums = {"status": f"error: {str(error)[:160]}"}
        failed |= rows_sums["status"] != "ok"
    print("\nGB/s: bytes of every tensor read once or written once over the median time; "
          "% copy: of the copy bandwidth measured here; x best: the better of eager and "
          "compile over tilesmith (> 1: tilesmith faster)")
    titles = ["op", "dtype", "shape", "ts ms", "ts GB/s", "% copy", "eager ms", "compile ms",
              "x eager", "x compile", "x best", "err", "tuned", "status"]
    lines, ratios = [], []
    for row in rows:
        ts_ms = row.get("ts_ms")
        gbs = row["bytes"] / (ts_ms * 1e-3) / 1e9 if ts_ms and row.get("bytes") else None
        others = [v for v in (row.get("eager_ms"), row.get("compile_ms")) if v]
        best = min(others) / ts_ms if ts_ms and others else None
        if best and row["status"] == "ok":
            ratios.append(best)
        f = lambda v, spec: "-" if v is None else format(v, spec)
        lines.append([row["op"], row["dtype"], row["shape"], f(ts_ms, ".4f"), f(gbs, ".0f"),
                      f(gbs and 100 * gbs / copy_gbs, ".1f"), f(row.get("eager_ms"), ".4f"),
                      f(row.get("compile_ms"), ".4f"),
                      f(ts_ms and row.get("eager_ms") and row["eager_ms"] / ts_ms, ".2f"),
                      f(ts_ms and row.get("compile_ms") and row["compile_ms"] / ts_ms, ".2f"),
                      f(best, ".2f"), f(row.get("err"), ".1e"),
                      "yes" if row.get("tuned") else "no", row["status"]])
    widths = [max(len(str(x)) for x in col) for col in zip(titles, *lines)]
    for cells in [titles, ["-" * w for w in widths]] + lines:
        print(" | ".join(str(v).rjust(w) if i >= 3 else str(v).ljust(w)
                         for i, (v, w) in enumerate(zip(cells, widths))))
    if rows_sums and "ts_ms" in rows_sums:
        gbs = rows_sums["bytes"] / (rows_sums["ts_ms"] * 1e-3) / 1e9
        print(f"multi_sum {args.multi_sum} (key {rows_sums['shape']}): {rows_sums['status']}, "
              f"tilesmith {rows_sums['ts_ms']:.4f} ms ({gbs:.0f} GB/s, {100 * gbs / copy_gbs:.1f}% "
              f"of copy), Python loop of t.sum() {rows_sums['loop_ms']:.3f} ms "
              f"({rows_sums['loop_ms'] / rows_sums['ts_ms']:.1f}x), torch._foreach_norm(ord 1, "
              f"same bytes) {rows_sums['foreach_ms']:.4f} ms "
              f"({rows_sums['foreach_ms'] / rows_sums['ts_ms']:.2f}x), err {rows_sums['err']:.1e}")
    elif rows_sums:
        print(f"multi_sum {args.multi_sum}: {rows_sums['status']}")
    if ratios:
        print(f"geomean x best of eager and compile, over {len(ratios)} verified cases: "
              f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"header": header, "rows": rows, "multi_sum": rows_sums}, out, indent=1)
    lib.tilesmith_runtime_destroy(rt)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
