#!/usr/bin/env python3
"""Which shapes' untuned matmul default differs between two builds: the shapes an A/B times.

usage: default_moves.py OLD_CLI [NEW_CLI] [--seeds FIRST-LAST] [--count DRAWS] [--dtype T,...]
                        [--narrow-n | --few-columns | --within RANGES] [--show N]

A change to the default's rules moves the picks of a few shapes and leaves the rest alone, so
an A/B (matmul_shapes.py --baseline) says something only on the shapes that moved, and a rule
set on one draw is checked on the moved shapes of fresh seeds. This draws shapes as
matmul_shapes.py does (the same seed gives the same shapes), asks each build's `tilesmith
source` for the config it would run (no GPU needed; NEW_CLI defaults to this checkout's
build/tilesmith), and prints how many moved, the commonest moves, and per dtype a --shapes
list for matmul_shapes.py. Exit status: 0, or 2 when a CLI fails.
"""
import argparse, collections, os, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import matmul_shapes as ms  # noqa: E402


def pick(cli, shape, dtype):
    """The config `cli` would run for (m, n, k, layout) in `dtype`, as its k=v,... text."""
    m, n, k, layout = shape
    command = [cli, "source", "--op", "matmul", "--dtype", dtype, "--shape", f"{m}x{n}x{k}"]
    command += ["--option", "a=col"] if layout[0] == "c" else []
    command += ["--option", "b=col"] if layout[1] == "c" else []
    done = subprocess.run(command, capture_output=True, text=True, errors="replace")
    for line in done.stdout.splitlines():
        if line.startswith("// tilesmith:") and "config " in line:
            return line.split("config ", 1)[1]
    print(f"default_moves: {' '.join(command)} printed no config (exit {done.returncode}): "
          f"{done.stderr.strip()[-300:]}", file=sys.stderr)
    sys.exit(2)


def summary(config):
    """A config's structure in a few words: its template, tile, cluster, consumers, split."""
    c = dict(item.split("=") for item in config.split(","))
    if c.get("variant") != "1":
        return f"variant {c.get('variant')} " + ",".join(
            f"{key}={value}" for key, value in c.items() if key != "variant")
    return (f"{c['block_m']}x{c['block_n']} {c['cluster_m']}x{c['cluster_n']} "
            f"c{c['consumers']} s{c['stages']} split {c['split_k']}"
            + (" swap" if c.get("swap_ab") == "1" else "")
            + (" pp" if c.get("pingpong") == "1" else ""))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old_cli")
    p.add_argument("new_cli", nargs="?", default=os.path.join(REPO, "build", "tilesmith"))
    p.add_argument("--seeds", default="15-15", help="FIRST-LAST: matmul_shapes.py seeds to draw")
    p.add_argument("--count", type=int, default=60, help="draws a seed")
    p.add_argument("--dtype", default="bf16", help="comma-separated: bf16, f16, f32")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--narrow-n", action="store_true")
    kind.add_argument("--few-columns", action="store_true")
    kind.add_argument("--within", metavar="M_LO-M_HIxN_LO-N_HIxK_LO-K_HI",
                      help="draw in a rule's domain (matmul_shapes.py --within)")
    p.add_argument("--show", type=int, default=10, help="moves to print one by one")
    args = p.parse_args()
    for cli in (args.old_cli, args.new_cli):
        if not os.access(cli, os.X_OK):
            print(f"default_moves: {cli} is not an executable tilesmith CLI", file=sys.stderr)
            return 2
    first, _, last = args.seeds.partition("-")
    dtypes = args.dtype.split(",")
    within = ms.parse_within(args.within) if args.within else None
    problems, seen = [], set()
    for seed in range(int(first), int(last or first) + 1):
        draws = (ms.draw_few_columns(args.count, seed) if args.few_columns
                 else ms.draw_shapes(args.count, seed, args.narrow_n, within))
        for i, shape in enumerate(draws):
            key = (shape, dtypes[(seed + i) % len(dtypes)])
            if key not in seen:
                seen.add(key)
                problems.append(key)
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        old = list(pool.map(lambda sd: pick(args.old_cli, *sd), problems))
        new = list(pool.map(lambda sd: pick(args.new_cli, *sd), problems))
    moved = [(sd, a, b) for sd, a, b in zip(problems, old, new) if a != b]
    print(f"{len(moved)} of {len(problems)} defaults moved (seeds {args.seeds}, {args.dtype})")
    moves = collections.Counter((summary(a), summary(b)) for _, a, b in moved)
    for (was, now), n in moves.most_common(8):
        print(f"  {n:4d}  {was}  ->  {now}")
    for ((m, n, k, layout), dtype), a, b in moved[:args.show]:
        print(f"  {m}x{n}x{k}:{layout} {dtype}  {summary(a)}  ->  {summary(b)}")
    for dtype in dtypes:
        shapes = [f"{m}x{n}x{k}:{layout}" for ((m, n, k, layout), d), _, _ in moved if d == dtype]
        if shapes:
            print(f"--dtype {dtype} --shapes {','.join(shapes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
