#!/usr/bin/env python3
"""Compares the trials and winners of two tilesmith databases, key by key (GPU model, problem,
template hash): whether both tried the same configs with the same outcomes, and which config
each picked. Used to check that a merge of shard databases equals the unsharded sweep's
(docs/distributed.md). "ok" and "pruned_early" count as one outcome (verified and timed):
whether a slow config is given up early depends on the best its sweep had found by then.
Exit status 0 when the configs and their outcomes are the same everywhere; the winners are
reported, since two configs within timing noise may trade places.

  python3 scripts/compare_databases.py merged.db unsharded.db
"""
import sqlite3
import sys


def read(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    trials, winners = {}, {}
    for gpu, problem, template, config, status, median in db.execute(
        "SELECT g.model_key, p.key, t.template_hash, t.config, t.status, t.median_ms"
        "  FROM trials t JOIN gpus g ON g.id = t.gpu_id JOIN problems p ON p.id = t.problem_id"
    ):
        trials.setdefault((gpu, problem, template), {})[config] = (status, median)
    for gpu, problem, template, config, median in db.execute(
        "SELECT g.model_key, p.key, w.template_hash, w.config, w.median_ms"
        "  FROM winners w JOIN gpus g ON g.id = w.gpu_id JOIN problems p ON p.id = w.problem_id"
    ):
        winners[(gpu, problem, template)] = (config, median)
    return trials, winners


def outcome(status):
    return "timed" if status in ("ok", "pruned_early") else status


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    (trials_a, winners_a), (trials_b, winners_b) = read(sys.argv[1]), read(sys.argv[2])
    same = True
    for key in sorted(set(trials_a) | set(trials_b)):
        a, b = trials_a.get(key, {}), trials_b.get(key, {})
        status_a = {c: outcome(s) for c, (s, _) in a.items()}
        status_b = {c: outcome(s) for c, (s, _) in b.items()}
        differ = sorted(c for c in set(status_a) | set(status_b) if status_a.get(c) != status_b.get(c))
        print(f"{key[1]} on {key[0]} (template {key[2][:8]}): {len(a)} and {len(b)} trials, "
              f"{len(differ)} configs differ in presence or outcome")
        for config in differ[:10]:
            print(f"    {config}: {status_a.get(config, 'absent')} / {status_b.get(config, 'absent')}")
        same = same and not differ
        wa, wb = winners_a.get(key), winners_b.get(key)
        for name, w, trials in (("first", wa, a), ("second", wb, b)):
            if w:
                print(f"  winner in the {name}:  {w[1]:.4f} ms  {w[0]}")
        if wa and wb and wa[0] != wb[0]:
            # Each winner's time in the other database: how far apart the two picks are.
            def timed(trials, config):
                median = trials.get(config, (None, None))[1]
                return "untimed" if median is None else f"{median:.4f} ms"
            print(f"  the winners differ: the second's pick timed {timed(a, wb[0])} in the first, "
                  f"the first's pick {timed(b, wa[0])} in the second")
        elif wa and wb:
            print("  the same winner")
    print("same configs and outcomes" if same else "the databases differ")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
