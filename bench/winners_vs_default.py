#!/usr/bin/env python3
"""A short tune of each shape, its winner timed beside the untuned default and cuBLAS.

usage: winners_vs_default.py (--shapes [Bx]MxNxK:LAYOUT[:DTYPE],... | --from-json FILE [--worst N])
                             [--budget 10s] [--dtype T] [--tilesmith PATH]

Where the default runs slowest against cuBLAS (a health check's worst rows: matmul_shapes.py
--json), the tuner says whether the space holds a faster kernel and which: each shape is tuned
with the model-guided strategy for --budget into its own database (`tilesmith tune`), then its
winner is timed in rounds beside the default and cuBLAS (`matmul_shapes.py --config`, which
verifies every output again). The winners' structures are the candidates for new default rules;
a rule is then drawn over fresh shapes of its domain and A/B'd (default_moves.py,
matmul_shapes.py --baseline). Prints a row a shape and the geometric mean of winner over
default. Exit status: 0, 1 when a shape found no verified winner or failed verification, 2 on
a setup problem.
"""
import argparse, json, math, os, subprocess, sys, tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def layout_options(layout):
    return (["--option", "a=col"] if layout[0] == "c" else []) + \
           (["--option", "b=col"] if layout[1] == "c" else [])


def winner_config(cli, shape, layout, dtype, budget, db):
    """The config `tilesmith tune` keeps for the shape, as k=v,... text, or None."""
    tune = subprocess.run([cli, "tune", "--op", "matmul", "--dtype", dtype, "--shape", shape,
                           "--strategy", "model", "--budget", budget, "--db", db]
                          + layout_options(layout), capture_output=True, text=True)
    if tune.returncode != 0:
        print(f"  {shape} {layout} {dtype}: tune failed: "
              f"{(tune.stdout + tune.stderr).strip().splitlines()[-1:]}", flush=True)
        return None
    exported = subprocess.run([cli, "export", "--db", db], capture_output=True, text=True)
    winners = json.loads(exported.stdout)["winners"] if exported.returncode == 0 else []
    if not winners:
        return None
    return ",".join(f"{k}={v}" for k, v in sorted(winners[0]["config"].items()))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--shapes", help="[Bx]MxNxK:LAYOUT[:DTYPE],... (layout rr, rc, cr, cc)")
    source.add_argument("--from-json", help="a matmul_shapes.py --json file: its worst rows")
    p.add_argument("--worst", type=int, default=8, help="with --from-json: how many rows")
    p.add_argument("--budget", default="10s", help="each shape's tune (tilesmith tune --budget)")
    p.add_argument("--dtype", default="bf16", help="where a shape names none (and --from-json)")
    p.add_argument("--tilesmith", default=os.path.join(REPO, "build", "tilesmith"))
    args = p.parse_args()
    if not os.path.isfile(args.tilesmith):
        print(f"winners_vs_default: no CLI at {args.tilesmith} (build it first)", file=sys.stderr)
        return 2
    specs = []
    if args.shapes:
        for item in args.shapes.split(","):
            parts = item.split(":")
            if len(parts) not in (2, 3):
                print(f"winners_vs_default: {item!r}: want SHAPE:LAYOUT[:DTYPE]", file=sys.stderr)
                return 2
            specs.append((parts[0], parts[1], parts[2] if len(parts) == 3 else args.dtype))
    else:
        with open(args.from_json) as f:
            rows = json.load(f)["rows"]
        rows.sort(key=lambda row: row["x_cublas"])
        for row in rows[:args.worst]:
            shape = f"{row['m']}x{row['n']}x{row['k']}"
            if row.get("batch", 1) != 1:
                shape = f"{row['batch']}x{shape}"
            specs.append((shape, row["layout"], args.dtype))
    work = tempfile.mkdtemp(prefix="winners_vs_default.")
    gains, failed = [], 0
    for i, (shape, layout, dtype) in enumerate(specs):
        config = winner_config(args.tilesmith, shape, layout, dtype, args.budget,
                               os.path.join(work, f"{i}.db"))
        if config is None:
            print(f"  {shape} {layout} {dtype}: no verified winner", flush=True)
            failed += 1
            continue
        report = os.path.join(work, f"{i}.json")
        timed = subprocess.run([sys.executable, os.path.join(REPO, "bench", "matmul_shapes.py"),
                                "--dtype", dtype, "--shapes", f"{shape}:{layout}",
                                "--config", f"win={config}", "--tilesmith", args.tilesmith,
                                "--json", report], capture_output=True, text=True)
        if timed.returncode != 0 or not os.path.isfile(report):
            print(f"  {shape} {layout} {dtype}: timing failed (exit {timed.returncode}): "
                  f"{timed.stdout.strip().splitlines()[-1:]}", flush=True)
            failed += 1
            continue
        with open(report) as f:
            row = json.load(f)["rows"][0]
        win = row["configs"].get("win")
        if not win or not win["verified"]:
            print(f"  {shape} {layout} {dtype}: the winner was not timed or not verified",
                  flush=True)
            failed += 1
            continue
        gain = row["ts_ms"] / win["ms"]
        gains.append(gain)
        print(f"  {shape:>16} {layout} {dtype:>4}  default {row['ts_ms']:.4f} ms "
              f"(x cuBLAS {row['x_cublas']:.2f})  winner {win['ms']:.4f} ms "
              f"(x default {gain:.2f}, x cuBLAS {row['cb_ms'] / win['ms']:.2f})  [{win['config']}]",
              flush=True)
    if gains:
        print(f"geomean winner x default over {len(gains)} shapes: "
              f"{math.exp(sum(map(math.log, gains)) / len(gains)):.3f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
