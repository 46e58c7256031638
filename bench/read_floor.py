#!/usr/bin/env python3
"""How near a pure read of N bytes comes to the memory floor, timed as the matmul suite times
(bench/matmul_bench.py: CUDA events, L2 flushed by a read before each rep, median).

The suite's floor for a decode product is (bytes of A + B + C) / the measured copy bandwidth.
A kernel that only reads the weight and does nothing else bounds from below what any matmul
over that weight can show against the floor under this timing: the start event's latency to
the first kernel, the first DRAM round trips and the tail are in every figure. Read kernels
tried: a Triton kernel (16-byte loads, one partial sum per program; the best of a few block
sizes and warp counts), torch's sum, and a copy of the same bytes (which also writes them).
Beside them, cuBLAS's x @ W^T at M = 1 and 16.

As the suite's decode cases, the read and cuBLAS's products are also timed a second way: as CUDA
graph replays over rotating weights (matmul_bench.make_graph_rounds), where the events' latency
to the first kernel is paid once a graph, not once a call.

usage: read_floor.py [--sizes NxK,...] [--rep-ms MS]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matmul_bench as mb  # noqa: E402  (timing and copy bandwidth)

mb.PROG = "read_floor"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096x4096,14336x4096,4096x14336",
                        help="weights N x K (bf16), comma separated")
    parser.add_argument("--warmup-ms", type=float, default=25)
    parser.add_argument("--rep-ms", type=float, default=100)
    args = parser.parse_args(argv)
    try:
        import torch
        import triton
        import triton.language as tl
    except Exception as error:  # ImportError, or a broken install failing at import
        mb.setup_error(f"{error} (this benchmark needs torch and triton)")
    if not torch.cuda.is_available():
        mb.setup_error("torch sees no CUDA device")

    @triton.jit
    def read_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
        tl.store(partial_ptr + tl.program_id(0), tl.sum(x.to(tl.float32), axis=0))

    bench = mb.make_bench(args.warmup_ms, args.rep_ms)
    copy_gbs = mb.copy_bandwidth_gbs(bench)
    print(f"{torch.cuda.get_device_name()}, copy bandwidth {copy_gbs:.0f} GB/s "
          f"(a 1 GiB copy, read + write)")
    rows = []
    for size in args.sizes.split(","):
        n, k = (int(v) for v in size.split("x"))
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        weight_bytes = w.numel() * w.element_size()
        floor_ms = weight_bytes / (copy_gbs * 1e9) * 1e3
        flat = w.view(-1)
        best_read, best_shape, best_launch = float("inf"), None, None
        for block in (4096, 8192, 16384):
            for warps in (4, 8):
                programs = triton.cdiv(flat.numel(), block)
                partial = torch.empty(programs, device="cuda", dtype=torch.float32)
                run = lambda: read_kernel[(programs,)](flat, partial, flat.numel(), BLOCK=block,
                                                       num_warps=warps)
                run()
                expected = flat.float().view(-1)[: programs * block].sum()
                if not torch.allclose(partial.sum(), expected, rtol=1e-3, atol=1e-1):
                    mb.setup_error("the read kernel's sum is wrong")
                ms = bench(run)
                if ms < best_read:
                    best_read, best_shape = ms, f"block {block}, {warps} warps"
                    best_launch = block, warps
        sum_ms = bench(lambda: flat.sum(dtype=torch.float32))
        dst = torch.empty_like(flat)
        copy_ms = bench(lambda: dst.copy_(flat))
        xs = {m: torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for m in (1, 16)}
        gemv = {m: bench(lambda x=x: torch.matmul(x, w.t())) for m, x in xs.items()}
        # As graph replays: the best read's launch and cuBLAS's products over rotating weights.
        block, warps = best_launch
        programs = triton.cdiv(flat.numel(), block)
        partial = torch.empty(programs, device="cuda", dtype=torch.float32)
        sets = mb.rotation_sets(weight_bytes)
        weights = [w] + [torch.randn_like(w) for _ in range(sets - 1)]
        graphed = mb.make_graph_rounds(mb.graph_calls(sets))({
            "read": lambda i: read_kernel[(programs,)](weights[i % sets].view(-1), partial,
                                                       flat.numel(), BLOCK=block, num_warps=warps),
            "m1": lambda i: torch.matmul(xs[1], weights[i % sets].t()),
            "m16": lambda i: torch.matmul(xs[16], weights[i % sets].t())})
        rows.append((size, weight_bytes / 1e6, floor_ms, best_read, best_shape, sum_ms, copy_ms,
                     gemv[1], gemv[16], {name: ms for name, (ms, _) in graphed.items()}))
        del w, flat, dst, weights
        torch.cuda.empty_cache()

    print()
    print("weight (bf16) | MB | floor ms | triton read ms (x floor) | torch sum ms (x floor) | "
          "copy ms (x floor of its 2x bytes) | cuBLAS M=1 ms (x floor) | cuBLAS M=16 ms (x floor)")
    print("---|---|---|---|---|---|---|---")
    for size, mbytes, floor, read, shape, total, copy, m1, m16, _ in rows:
        print(f"{size} | {mbytes:.1f} | {floor:.4f} | {read:.4f} ({read / floor:.2f}; {shape}) | "
              f"{total:.4f} ({total / floor:.2f}) | {copy:.4f} ({copy / (2 * floor):.2f}) | "
              f"{m1:.4f} ({m1 / floor:.2f}) | {m16:.4f} ({m16 / floor:.2f})")
    print()
    print("as CUDA graph replays over rotating weights | triton read ms (x floor) | "
          "cuBLAS M=1 ms (x floor) | cuBLAS M=16 ms (x floor)")
    print("---|---|---|---")
    for size, _, floor, *_, graphed in rows:
        print(f"{size} | " + " | ".join(f"{graphed[name]:.4f} ({graphed[name] / floor:.2f})"
                                        for name in ("read", "m1", "m16")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
