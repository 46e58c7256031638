#!/usr/bin/env python3
"""Benchmark tilesmith's attention against torch SDPA's FlashAttention-2 and cuDNN.

scaled_dot_product_attention with the FLASH_ATTENTION and CUDNN_ATTENTION backends, in one
process, side by side; the forward, or with --backward the forward and backward together.

usage: attention_bench.py [--cases NAME,...] [--dtype bf16|f16] [--layout bshd|bhsd]
                          [--backward] [--tune-budget 6s|N|all|none] [--skip-flash]
                          [--skip-cudnn] [--json FILE] [--tune-log FILE] [--lib PATH]
                          [--tilesmith PATH] [--db PATH] [--warmup-ms MS] [--rep-ms MS]

Each case is first tuned (`tilesmith tune --op attention`, unless --tune-budget none), then
verified, then timed. Verification follows FlashAttention's rule: against an fp32 reference
(computed here in chunks of query rows), tilesmith's max abs error and relative Frobenius error
must each be within 2x torch's own (the FLASH backend's output, else cuDNN's; with neither, the
rounding error) plus the error of merely rounding the reference to the dtype; its O and
logsumexp are NaN-poisoned first, and the logsumexp must match the reference's (relative
Frobenius error below 1e-3). Timing: CUDA events, median, L2 flushed by
reading a 256 MB buffer (matmul_bench.make_bench); tilesmith writes the logsumexp in the timed
call, as FlashAttention's forward does. tilesmith gets [B, S, H, D] tensors (--layout bshd, the
default) and torch their [B, H, S, D] view, .transpose(1, 2), as users call SDPA; --layout bhsd
gives both contiguous [B, H, S, D]. TFLOP/s: 4*B*H*D per visible query-key pair (causal: those
on or below the bottom-right-aligned diagonal, about half). A backend that refuses a case (no
GQA, no such head dim) shows n/a. Exit status: 0 all verified, 1 a verification failure or
error, 2 setup problem.

--backward: both ops are tuned (`--op attention` and `--op attention_backward`); each timed
call is a forward and a backward (torch: SDPA then torch.autograd.grad of its output, from a
random dO), and the backward alone is timed too (torch: autograd.grad with retain_graph).
dQ, dK and dV are verified by the same rule against an fp32 reference of the backward
(computed here from the fp32 forward, chunk by chunk) and torch's own gradients; they are
NaN-poisoned first. TFLOP/s count the backward as 2.5 forwards (its five products against two):
3.5 x the forward's FLOPs for forward+backward.
"""
import argparse, collections, ctypes, json, math, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matmul_bench as mb  # noqa: E402  (the C library loader, the timer, the copy bandwidth)

mb.PROG = "attention_bench"
REPO = mb.REPO
LAYOUTS = {"bshd": 0, "bhsd": 1}  # enum tilesmith_attention_layout
BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}  # torch's SDPBackend names
LSE_TOLERANCE = 1e-3  # relative Frobenius error of the logsumexp (fp32 both sides)
REF_CHUNK_BYTES = 1 << 30  # the fp32 reference's scores per chunk of query rows

Case = collections.namedtuple("Case", "name batch heads kv_heads seq head_dim causal")


def all_cases():
    """The issue's shapes, each causal and not, then a GQA case and a ragged length."""
    shapes = [("", 16, 16, 16, 512, 64), ("", 8, 16, 16, 2048, 64), ("", 4, 16, 16, 4096, 128),
              ("", 2, 16, 16, 8192, 128), ("", 1, 16, 16, 16384, 128), ("", 8, 32, 32, 2048, 128),
              ("gqa_", 4, 32, 8, 4096, 128), ("ragged_", 4, 16, 16, 3000, 128)]
    cases = []
    for prefix, b, h, kv, s, d in shapes:
        name = f"{prefix}b{b}h{h}" + (f"kv{kv}" if kv != h else "") + f"s{s}d{d}"
        cases += [Case(name + suffix, b, h, kv, s, d, causal)
                  for suffix, causal in (("", False), ("_causal", True))]
    return cases


def problem_shape(case):
    """The CLI's shape: BxHxSxD for self-attention, BxHQxHKVxSQxSKxD with fewer kv heads."""
    if case.kv_heads == case.heads:
        return f"{case.batch}x{case.heads}x{case.seq}x{case.head_dim}"
    return f"{case.batch}x{case.heads}x{case.kv_heads}x{case.seq}x{case.seq}x{case.head_dim}"


def flops(case):
    """4*D FLOPs per visible query-key pair and head (QK^T and PV), as the tuner counts them."""
    sq = sk = case.seq
    pairs = (sum(min(max(i + sk - sq + 1, 0), sk) for i in range(sq)) if case.causal
             else sq * sk)
    return 4.0 * case.batch * case.heads * pairs * case.head_dim


BACKWARD_FLOPS = 2.5  # the backward's FLOPs over the forward's


AttentionDesc, AttentionBackwardDesc = mb._capi.AttentionDesc, mb._capi.AttentionBackwardDesc


def parse_args(argv=None):
    names = [case.name for case in all_cases()]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="cases: " + ", ".join(names))
    p.add_argument("--cases", default=",".join(names), help="comma-separated names (below)")
    p.add_argument("--dtype", choices=["bf16", "f16"], default="bf16")
    p.add_argument("--layout", choices=list(LAYOUTS), default="bshd",
                   help="tilesmith's tensors; torch gets their [B, H, S, D] view")
    p.add_argument("--backward", action="store_true",
                   help="time and verify the forward and backward together (and the backward)")
    p.add_argument("--tune-budget", default="6s",
                   help="per case and op: Ns, N candidates, all, none")
    p.add_argument("--skip-flash", action="store_true", help="no SDPA FLASH_ATTENTION column")
    p.add_argument("--skip-cudnn", action="store_true", help="no SDPA CUDNN_ATTENTION column")
    p.add_argument("--json")
    p.add_argument("--tune-log")
    p.add_argument("--lib", default=os.path.join(REPO, "build", "libtilesmith.so"))
    p.add_argument("--tilesmith", default=os.path.join(REPO, "build", "tilesmith"))
    p.add_argument("--db", default=os.environ.get("TILESMITH_DB"))
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--rep-ms", type=float, default=200.0)
    args = p.parse_args(argv)
    wanted = [name for name in args.cases.split(",") if name]
    unknown = [name for name in wanted if name not in names]
    if unknown or not wanted:
        p.error(f"unknown case(s) {', '.join(unknown) or '(none given)'}; "
                f"known: {', '.join(names)}")
    args.cases = [case for case in all_cases() if case.name in wanted]
    return args


def tune(args, case, log):
    options = ["causal=1"] if case.causal else []  # the defaults (causal=0, layout=bshd) left out
    options += [f"layout={args.layout}"] if args.layout != "bshd" else []
    ops = ["attention", "attention_backward"] if args.backward else ["attention"]
    return " + ".join(mb.tune_with_cli(args, op, args.dtype, problem_shape(case), options, log)
                      for op in ops)


def reference(torch, q, k, v, case):
    """O and the logsumexp in fp32 from [B, H, S, D] views, every score materialized, one batch
    and one chunk of query rows at a time (the whole S=16384 score matrix of 16 heads would be
    16 GB in fp32). Causal masks bottom-right aligned: query i sees key j <= i + seq_k - seq_q."""
    group = case.heads // case.kv_heads
    scale = 1 / math.sqrt(case.head_dim)
    sq = sk = case.seq
    out = torch.empty(q.shape, device="cuda", dtype=torch.float32)
    lse = torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
    chunk = max(1, REF_CHUNK_BYTES // (case.heads * sk * 4))
    keys = torch.arange(sk, device="cuda")
    for b in range(case.batch):
        kf = k[b].float().repeat_interleave(group, dim=0)  # query head h reads kv head h / group
        vf = v[b].float().repeat_interleave(group, dim=0)
        for r0 in range(0, sq, chunk):
            r1 = min(r0 + chunk, sq)
            scores = torch.matmul(q[b, :, r0:r1].float(), kf.transpose(1, 2)) * scale
            if case.causal:
                rows = torch.arange(r0, r1, device="cuda")
                scores.masked_fill_(keys[None, :] > rows[:, None] + (sk - sq), float("-inf"))
            lse[b, :, r0:r1] = torch.logsumexp(scores, -1)
            scores = torch.exp(scores - lse[b, :, r0:r1, None])
            out[b, :, r0:r1] = torch.matmul(scores, vf)
            del scores
    return out, lse


def reference_backward(torch, q, k, v, d_o, case):
    """dQ, dK and dV in fp32 from [B, H, S, D] views, by the exact forward's O and logsumexp,
    a batch and a chunk of query rows at a time as reference() does; a kv head's dK and dV sum
    over its group's query heads."""
    out, lse = reference(torch, q, k, v, case)
    group = case.heads // case.kv_heads
    scale = 1 / math.sqrt(case.head_dim)
    sq = sk = case.seq
    dq = torch.empty(q.shape, device="cuda", dtype=torch.float32)
    dk = torch.empty(k.shape, device="cuda", dtype=torch.float32)
    dv = torch.empty(v.shape, device="cuda", dtype=torch.float32)
    chunk = max(1, REF_CHUNK_BYTES // (case.heads * sk * 4))
    keys = torch.arange(sk, device="cuda")
    for b in range(case.batch):
        kf = k[b].float().repeat_interleave(group, dim=0)
        vf = v[b].float().repeat_interleave(group, dim=0)
        dkf, dvf = torch.zeros_like(kf), torch.zeros_like(vf)
        for r0 in range(0, sq, chunk):
            r1 = min(r0 + chunk, sq)
            qc, doc = q[b, :, r0:r1].float(), d_o[b, :, r0:r1].float()
            p = torch.matmul(qc, kf.transpose(1, 2)) * scale
            if case.causal:
                rows = torch.arange(r0, r1, device="cuda")
                p.masked_fill_(keys[None, :] > rows[:, None] + (sk - sq), float("-inf"))
            p = torch.exp(p - lse[b, :, r0:r1, None])
            ds = torch.matmul(doc, vf.transpose(1, 2))
            ds -= (doc * out[b, :, r0:r1]).sum(-1, keepdim=True)
            ds *= p
            dq[b, :, r0:r1] = torch.matmul(ds, kf) * scale
            dkf += torch.matmul(ds.transpose(1, 2), qc) * scale
            dvf += torch.matmul(p.transpose(1, 2), doc)
            del p, ds
        dk[b] = dkf.view(case.kv_heads, group, sk, -1).sum(1)
        dv[b] = dvf.view(case.kv_heads, group, sk, -1).sum(1)
    del out, lse
    return dq, dk, dv


def errors(got, ref):
    """Max abs error and relative Frobenius error of `got` against the fp32 `ref`."""
    diff = got.float() - ref
    return float(diff.abs().max()), float(diff.norm() / ref.norm())


def limits(row, prefix, ref, dt, backends):
    """FlashAttention's rule for one output (prefix "" for O, "dq_" ... for the gradients):
    within 2x torch's own error plus the error of rounding the exact answer to the dtype; with
    neither SDPA backend, 3x that rounding error."""
    round_abs, round_rel = errors(ref.to(dt), ref)
    base = next((key for key in ("flash", "cudnn") if key in backends), "rounding")
    row["err_base"] = base
    base_abs, base_rel = ((row[f"{prefix}{base}_abs"], row[f"{prefix}{base}_rel"])
                          if base != "rounding" else (round_abs, round_rel))
    row[f"{prefix}abs_limit"] = 2 * base_abs + round_abs
    row[f"{prefix}rel_limit"] = 2 * base_rel + round_rel


def verdict(row, prefix):
    """The rule's failures for one output, named."""
    name = prefix.rstrip("_") or "O"
    failures = []
    if not row[f"{prefix}ts_abs"] <= row[f"{prefix}abs_limit"]:
        failures.append(f"{name} abs err")
    if not row[f"{prefix}ts_rel"] <= row[f"{prefix}rel_limit"]:
        failures.append(f"{name} rel err")
    return failures


def run_case(row, case, args, lib, rt, bench, torch):
    """One case: fills `row`; returns True when tilesmith's result is wrong."""
    F, attention = torch.nn.functional, torch.nn.attention
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    b, h, kv, s, d = case.batch, case.heads, case.kv_heads, case.seq, case.head_dim
    bshd = args.layout == "bshd"
    make = lambda heads: torch.randn(*((b, s, heads, d) if bshd else (b, heads, s, d)),
                                     device="cuda", dtype=dt)
    torch.manual_seed(0)  # a case's inputs do not depend on which cases ran before it
    q, k, v = make(h), make(kv), make(kv)
    # NaN-poisoned outputs: an element the kernel never writes stays NaN and is caught.
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, s), float("nan"), device="cuda", dtype=torch.float32)
    view = (lambda t: t.transpose(1, 2)) if bshd else (lambda t: t)  # [B, H, S, D] for torch
    qt, kt, vt, ot = view(q), view(k), view(v), view(o)
    desc = AttentionDesc(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                         lse=lse.data_ptr(), batch=b, heads=h, kv_heads=kv, seq_q=s, seq_k=s,
                         head_dim=d, dtype=mb.DTYPE_CODES[args.dtype], causal=int(case.causal),
                         layout=LAYOUTS[args.layout])  # scale 0: 1/sqrt(d); strides 0: packed
    buf, tuned = ctypes.create_string_buffer(1024), ctypes.c_int(0)
    mb.check(lib, lib.tilesmith_attention_config(rt, ctypes.byref(desc), buf, len(buf),
                                                 ctypes.byref(tuned)), "tilesmith_attention_config")
    row["config"], row["tuned"] = buf.value.decode(), bool(tuned.value)
    stream = torch.cuda.current_stream().cuda_stream

    def ts():
        mb.check(lib, lib.tilesmith_attention(rt, ctypes.byref(desc), stream),
                 "tilesmith_attention")

    def sdpa():
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=case.causal,
                                              enable_gqa=kv != h)

    ts()  # also the first-call lookup / NVRTC compile, outside the timing
    torch.cuda.synchronize()
    ref_o, ref_lse = reference(torch, qt, kt, vt, case)
    unwritten = int((~torch.isfinite(o)).sum()) + int((~torch.isfinite(lse)).sum())
    row["ts_abs"], row["ts_rel"] = errors(ot, ref_o)
    row["lse_rel"] = float((lse - ref_lse).norm() / ref_lse.norm())
    backends = {}
    for key, name in BACKENDS.items():
        if getattr(args, f"skip_{key}"):
            row[f"{key}_note"] = "skipped"
            continue
        backend = getattr(attention.SDPBackend, name)
        try:
            with attention.sdpa_kernel(backend):
                out = sdpa()
            torch.cuda.synchronize()
            row[f"{key}_abs"], row[f"{key}_rel"] = errors(out, ref_o)
            backends[key] = backend
            del out
        except Exception as error:  # the backend refuses this case: n/a, not a failure
            row[f"{key}_note"] = str(error).strip().split("\n")[0][:120]
    limits(row, "", ref_o, dt, backends)
    del ref_o, ref_lse
    problems = []
    if unwritten:
        problems.append(f"{unwritten} non-finite")
    problems += verdict(row, "")
    if not row["lse_rel"] <= LSE_TOLERANCE:
        problems.append("lse")
    if problems:
        row["status"] = "WRONG (" + ", ".join(problems) + ")"

    if args.backward:
        problems += run_backward(row, case, args, lib, rt, bench, torch, desc, ts, backends,
                                 (q, k, v, o, lse), view)
        if problems:
            row["status"] = "WRONG (" + ", ".join(problems) + ")"
        return bool(problems)
    row["ts_ms"] = bench(ts)
    for key, backend in backends.items():
        with attention.sdpa_kernel(backend):  # entered once: its cost stays out of the timed reps
            row[f"{key}_ms"] = bench(sdpa)
    return bool(problems)


def run_backward(row, case, args, lib, rt, bench, torch, desc, forward, backends, tensors, view):
    """--backward: verifies tilesmith's dQ, dK, dV and times forward+backward and the backward
    alone beside the backends that ran the forward; returns the failures."""
    F, attention = torch.nn.functional, torch.nn.attention
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    q, k, v, o, lse = tensors
    d_o = torch.randn_like(q)
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]  # dQ, dK, dV poisoned
    bdesc = AttentionBackwardDesc(forward=desc, d_o=d_o.data_ptr(), dq=grads[0].data_ptr(),
                                  dk=grads[1].data_ptr(), dv=grads[2].data_ptr())
    buf, tuned = ctypes.create_string_buffer(1024), ctypes.c_int(0)
    mb.check(lib, lib.tilesmith_attention_backward_config(rt, ctypes.byref(bdesc), buf, len(buf),
                                                          ctypes.byref(tuned)),
             "tilesmith_attention_backward_config")
    row["bwd_config"], row["bwd_tuned"] = buf.value.decode(), bool(tuned.value)
    stream = torch.cuda.current_stream().cuda_stream

    def ts_backward():
        mb.check(lib, lib.tilesmith_attention_backward(rt, ctypes.byref(bdesc), stream),
                 "tilesmith_attention_backward")

    def ts_both():
        forward()
        ts_backward()

    ts_both()  # the forward's O and logsumexp feed the backward, as in training
    torch.cuda.synchronize()
    qt, kt, vt, dot = view(q), view(k), view(v), view(d_o)
    refs = reference_backward(torch, qt, kt, vt, dot, case)
    unwritten = sum(int((~torch.isfinite(g)).sum()) for g in grads)
    leaves = [t.detach().requires_grad_() for t in (qt, kt, vt)]

    def sdpa_forward():
        return F.scaled_dot_product_attention(*leaves, is_causal=case.causal,
                                              enable_gqa=case.kv_heads != case.heads)

    failures = [f"{unwritten} non-finite gradients"] if unwritten else []
    for name, got, ref in zip(("dq", "dk", "dv"), grads, refs):
        row[f"{name}_ts_abs"], row[f"{name}_ts_rel"] = errors(view(got), ref)
    for key, backend in backends.items():
        with attention.sdpa_kernel(backend):
            theirs = torch.autograd.grad(sdpa_forward(), leaves, dot)
        for name, got, ref in zip(("dq", "dk", "dv"), theirs, refs):
            row[f"{name}_{key}_abs"], row[f"{name}_{key}_rel"] = errors(got, ref)
        del theirs
    for name, ref in zip(("dq", "dk", "dv"), refs):
        limits(row, f"{name}_", ref, dt, backends)
        failures += verdict(row, f"{name}_")
    # The table's error column: the worst gradient's relative error over its limit.
    row["grad_rel_ratio"] = max(row[f"{n}_ts_rel"] / row[f"{n}_rel_limit"] for n in ("dq", "dk", "dv"))
    del refs

    row["ts_ms"] = bench(ts_both)
    row["ts_bwd_ms"] = bench(ts_backward)
    for key, backend in backends.items():
        with attention.sdpa_kernel(backend):
            row[f"{key}_ms"] = bench(lambda: torch.autograd.grad(sdpa_forward(), leaves, dot))
            out = sdpa_forward()
            row[f"{key}_bwd_ms"] = bench(
                lambda: torch.autograd.grad(out, leaves, dot, retain_graph=True))
            del out
    return failures


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch, torch.nn.attention  # sdpa_kernel and SDPBackend: torch 2.3 and later
    except Exception as error:
        mb.setup_error(f"{error} (this benchmark needs torch with torch.nn.attention)")
    if not torch.cuda.is_available():
        mb.setup_error("torch sees no CUDA device")
    if args.tune_budget != "none" and not os.path.isfile(args.tilesmith):
        mb.setup_error(f"{args.tilesmith} not found (build it, pass --tilesmith, or "
                       "--tune-budget none)")
    lib = mb.load_lib(args.lib)
    try:
        rt = mb.create_runtime(lib, args.db)
    except RuntimeError as error:
        mb.setup_error(str(error))
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must really be fp32
    bench = mb.make_bench(args.warmup_ms, args.rep_ms)
    copy_gbs = mb.copy_bandwidth_gbs(bench)
    gpu = torch.cuda.get_device_name()
    peak = mb.peak_tflops(gpu)
    header = {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
              "cudnn": torch.backends.cudnn.version(), "copy_GBps": copy_gbs,
              "peak_TFLOPs": peak, "dtype": args.dtype, "layout": args.layout,
              "timing": f"median of event-timed reps (warmup {args.warmup_ms} ms, rep "
                        f"{args.rep_ms} ms), L2 flushed", "tune": args.tune_budget,
              "db": args.db or "(library default)"}
    for key, value in header.items():
        print(f"{key:>11}: {value:.0f}" if isinstance(value, float) else f"{key:>11}: {value}")
    log = open(args.tune_log, "a") if args.tune_log else None
    rows, failed = [], False
    for case in args.cases:
        row = {"case": case.name, "shape": problem_shape(case), "causal": case.causal,
               "flops": flops(case), "status": "ok"}
        rows.append(row)
        try:
            row["tune"] = tune(args, case, log)
            failed |= run_case(row, case, args, lib, rt, bench, torch)
        except Exception as error:  # a setup or launch failure of one case: say so, go on
            row["status"] = f"error: {str(error)[:160]}"
            failed = True
        print(f"  {case.name:>28}: {row['status']}, tune {row.get('tune', '-')}, ts "
              f"{row.get('ts_ms', float('nan')):.4f} ms, flash "
              f"{row.get('flash_ms', float('nan')):.4f}, cudnn "
              f"{row.get('cudnn_ms', float('nan')):.4f}", flush=True)
        torch.cuda.empty_cache()
    lib.tilesmith_runtime_destroy(rt)
    if log:
        log.close()

    for row in rows:
        if args.backward:
            row["flops"] *= 1 + BACKWARD_FLOPS
        tflops = lambda ms: row["flops"] / (ms * 1e-3) / 1e12 if ms else None
        for key in ("ts", "flash", "cudnn"):
            row[f"{key}_tflops"] = tflops(row.get(f"{key}_ms"))
        row["pct_peak"] = 100 * row["ts_tflops"] / peak if peak and row["ts_tflops"] else None
        for key in BACKENDS:  # speedup: the backend's time over tilesmith's, > 1: tilesmith faster
            row[f"x_{key}"] = (row[f"{key}_ms"] / row["ts_ms"]
                               if row.get("ts_ms") and row.get(f"{key}_ms") else None)

    f = lambda v, spec: "-" if v is None else format(v, spec)
    print()
    for row in rows:  # configs and errors here: too wide for the table, which must come last
        kind = {True: "tuned", False: "default", None: "?"}[row.get("tuned")]
        print(f"config {row['case']:>28} ({kind}): {row.get('config') or '-'}")
        if args.backward:
            kind = {True: "tuned", False: "default", None: "?"}[row.get("bwd_tuned")]
            print(f"bwd    {row['case']:>28} ({kind}): {row.get('bwd_config') or '-'}")

    def backend_errors(row, key):
        if f"{key}_abs" in row:
            return f"{key} abs {row[f'{key}_abs']:.1e} rel {row[f'{key}_rel']:.1e}"
        return f"{key} n/a ({row[f'{key}_note']})" if f"{key}_note" in row else f"{key} -"
    for row in rows:
        torch_errs = ", ".join(backend_errors(row, key) for key in BACKENDS)
        print(f"err    {row['case']:>28}: tilesmith abs {f(row.get('ts_abs'), '.1e')} "
              f"(limit {f(row.get('abs_limit'), '.1e')}) rel {f(row.get('ts_rel'), '.1e')} "
              f"(limit {f(row.get('rel_limit'), '.1e')}, from {row.get('err_base', '-')}), "
              f"lse rel {f(row.get('lse_rel'), '.1e')}; {torch_errs}")
        for name in ("dq", "dk", "dv") if args.backward else ():
            print(f"err    {row['case']:>28}: {name} tilesmith abs "
                  f"{f(row.get(f'{name}_ts_abs'), '.1e')} (limit "
                  f"{f(row.get(f'{name}_abs_limit'), '.1e')}) rel "
                  f"{f(row.get(f'{name}_ts_rel'), '.1e')} (limit "
                  f"{f(row.get(f'{name}_rel_limit'), '.1e')}); " +
                  ", ".join(f"{key} rel {f(row.get(f'{name}_{key}_rel'), '.1e')}"
                            for key in BACKENDS))
    if args.json:
        with open(args.json, "w") as out:
            clean = [{key: None if isinstance(v, float) and not math.isfinite(v) else v
                      for key, v in row.items()} for row in rows]  # strict JSON has no NaN
            json.dump({"header": header, "rows": clean}, out, indent=1)

    what = ("forward+backward (3.5 x 4*B*H*D per visible query-key pair)" if args.backward
            else "forward (4*B*H*D per visible query-key pair)")
    print(f"\nTFLOP/s: {what} over the median time; % peak: "
          f"tilesmith's of {f(peak, '.0f')} TFLOP/s; x flash, x cudnn: their time over "
          "tilesmith's (> 1: tilesmith faster); n/a: the backend refused the case"
          + ("; bwd ms: the backward alone; rel err: the worst gradient's over its limit"
             if args.backward else ""))
    # A backend that was tried and refused the case: n/a; one skipped or never reached: -.
    na = lambda row, key, value: "n/a" if row.get(f"{key}_note", "skipped") != "skipped" else value
    titles = ["case", "ts ms", "ts TFLOP/s", "% peak", "flash ms", "flash TFLOP/s", "cudnn ms",
              "cudnn TFLOP/s", "x flash", "x cudnn"]
    titles += (["ts bwd ms", "flash bwd ms", "cudnn bwd ms", "rel err / limit"] if args.backward
               else ["rel err"])
    titles += ["tuned", "status"]
    lines = []
    for row in rows:
        line = [row["case"], f(row.get("ts_ms"), ".4f"), f(row.get("ts_tflops"), ".0f"),
                f(row.get("pct_peak"), ".1f"),
                na(row, "flash", f(row.get("flash_ms"), ".4f")),
                na(row, "flash", f(row.get("flash_tflops"), ".0f")),
                na(row, "cudnn", f(row.get("cudnn_ms"), ".4f")),
                na(row, "cudnn", f(row.get("cudnn_tflops"), ".0f")),
                na(row, "flash", f(row.get("x_flash"), ".3f")),
                na(row, "cudnn", f(row.get("x_cudnn"), ".3f"))]
        if args.backward:
            line += [f(row.get("ts_bwd_ms"), ".4f"), na(row, "flash", f(row.get("flash_bwd_ms"), ".4f")),
                     na(row, "cudnn", f(row.get("cudnn_bwd_ms"), ".4f")),
                     f(row.get("grad_rel_ratio"), ".2f")]
            tuned = "yes" if row.get("tuned") and row.get("bwd_tuned") else "no"
        else:
            line += [f(row.get("ts_rel"), ".1e")]
            tuned = "yes" if row.get("tuned") else "no"
        lines.append(line + [tuned, row["status"]])
    widths = [max(len(str(x)) for x in col) for col in zip(titles, *lines)]
    for cells in [titles, ["-" * w for w in widths]] + lines:
        print(" | ".join(str(v).rjust(w) if 0 < i < len(widths) - 1 else str(v).ljust(w)
                         for i, (v, w) in enumerate(zip(cells, widths))).rstrip())
    verified = [row for row in rows if row["status"] == "ok"]
    means = {}
    for key in BACKENDS:
        ratios = [row[f"x_{key}"] for row in verified if row.get(f"x_{key}")]
        means[key] = (math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
                      len(ratios))
        print(f"geomean x {key} ({BACKENDS[key]} time / tilesmith time) over {len(ratios)} "
              f"verified case(s): {f(means[key][0], '.3f')}")
    print(f"summary{' (forward+backward)' if args.backward else ''}: {len(verified)}/{len(rows)} case(s) verified; tilesmith vs FlashAttention-2 "
          f"{f(means['flash'][0], '.3f')}x ({means['flash'][1]}), vs cuDNN "
          f"{f(means['cudnn'][0], '.3f')}x ({means['cudnn'][1]}) (geomean speedups, > 1: "
          "tilesmith faster)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
