#!/usr/bin/env python3
"""The host time of a tiny tilesmith.matmul from Python against torch.matmul's (issue 16's bar:
the custom op's overhead no more than torch's), in one process, on the installed (or PYTHONPATH)
tilesmith package.

A 16x16x16 bf16 matmul runs in ~3 us on the GPU, so a loop of calls is bound by the host: the
time per call of a loop of 3000 is the host's cost (median of 7 loops, after 300 warm-up calls).
Two loops each: the result dropped at once (torch's allocator hands the same block back, so the
runtime's plan for the last addresses is reused) and results kept alive in a ring of 64 (a new
output address every call, as in a model's forward). The database is a fresh one in a temporary
folder unless --db names one, so the kernel is the default config of the shape.

usage: python_overhead.py [--db PATH] [--size 16] [--calls 3000]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch


def per_call_us(fn, calls, loops=7):
    for _ in range(300):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(loops):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--db")
    p.add_argument("--size", type=int, default=16)
    p.add_argument("--calls", type=int, default=3000)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("python_overhead: skipped: no CUDA device")
        return 0
    folder = tempfile.TemporaryDirectory()
    import tilesmith
    tilesmith.use_database(args.db or os.path.join(folder.name, "overhead.db"))
    n = args.size
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    error = (tilesmith.matmul(a, b).float() - a.float() @ b.float()).abs().max().item()
    if error > 0.05 * n ** 0.5:
        print(f"python_overhead: tilesmith.matmul is wrong (max error {error})")
        return 1
    ring = [None] * 64
    turn = [0]

    def kept(fn):
        def call():
            ring[turn[0] % 64] = fn(a, b)
            turn[0] += 1
        return call

    rows = []
    for name, fn in (("tilesmith.matmul", tilesmith.matmul), ("torch.matmul", torch.matmul)):
        rows.append((name, per_call_us(lambda: fn(a, b), args.calls),
                     per_call_us(kept(fn), args.calls)))
    config, _ = tilesmith.describe("matmul", a, b)
    print(f"host us per call, {n}x{n}x{n} bf16 (median of 7 loops of {args.calls}); "
          f"tilesmith's config {config}")
    print(f"{'':18s} {'result dropped':>15s} {'results kept':>13s}")
    for name, dropped, kept_us in rows:
        print(f"{name:18s} {dropped:15.2f} {kept_us:13.2f}")
    ours, theirs = rows[0], rows[1]
    print(f"tilesmith / torch: {ours[1] / theirs[1]:.2f}x dropped, {ours[2] / theirs[2]:.2f}x kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
