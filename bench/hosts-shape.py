#!/usr/bin/env python3
"""Analyses bench/run-hosts-shape.sh's tables: per (hosts, algorithm, size) the median over the
rounds of the out-of-place time; a least-squares line of small-message time (8 B to 4 KiB)
against N for Ring and against log2 N for Tree, with R^2 per size; and per host count the
Tree-to-Ring crossover: the smallest size from which Ring's median time is below Tree's at that
size and every larger one. Usage: hosts-shape.py OUTDIR"""
import glob
import math
import os
import re
import statistics
import sys


def rows(path):
    """(size, out-of-place time us, #wrong oop, #wrong ip) of a collbench table."""
    for line in open(path):
        f = line.split()
        if len(f) >= 13 and f[0].isdigit() and not line.startswith("#"):
            yield int(f[0]), float(f[5]), int(f[8]), int(f[12])


def fit(xs, ys):
    """slope, intercept and R^2 of the least-squares line."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    icpt = my - slope * mx
    ss_res = sum((y - (icpt + slope * x)) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return slope, icpt, 1 - ss_res / ss_tot if ss_tot > 0 else float("nan")


def main(out):
    times = {}  # (hosts, algo, size) -> [time per round]
    wrong = 0
    for path in sorted(glob.glob(os.path.join(out, "h*-*-run*.txt"))):
        m = re.match(r"h(\d+)-(\w+)-run(\d+)\.txt$", os.path.basename(path))
        if not m:
            continue
        h, algo = int(m.group(1)), m.group(2)
        for size, t, w1, w2 in rows(path):
            times.setdefault((h, algo, size), []).append(t)
            wrong += w1 + w2
    if not times:
        sys.exit(f"no tables in {out}")
    med = {k: statistics.median(v) for k, v in times.items()}
    hosts = sorted({k[0] for k in med})
    sizes = sorted({k[2] for k in med})
    rounds = max(len(v) for v in times.values())
    print(f"# {out}: {rounds} rounds, hosts {hosts}, #wrong {wrong} in all")
    print("\n## Median out-of-place time, us")
    print("| size | " + " | ".join(f"Ring {h} | Tree {h}" for h in hosts) + " |")
    print("|---|" + "---|---|" * len(hosts))
    for s in sizes:
        cells = []
        for h in hosts:
            for a in ("Ring", "Tree"):
                v = med.get((h, a, s))
                cells.append(f"{v:.0f}" if v is not None else "")
        print(f"| {s} | " + " | ".join(cells) + " |")
    print("\n## Small-message time against host count (least squares over the medians)")
    print("| size | Ring: slope us/host | Ring R^2 | Tree: slope us/doubling | Tree R^2 |")
    print("|---|---|---|---|---|")
    for s in [s for s in sizes if s <= 4096]:
        try:
            rx = [h for h in hosts]
            ry = [med[(h, "Ring", s)] for h in hosts]
            tx = [math.log2(h) for h in hosts]
            ty = [med[(h, "Tree", s)] for h in hosts]
        except KeyError:
            continue
        rs, _, rr2 = fit(rx, ry)
        ts, _, tr2 = fit(tx, ty)
        print(f"| {s} | {rs:.0f} | {rr2:.3f} | {ts:.0f} | {tr2:.3f} |")
    print("\n## Tree-to-Ring crossover (smallest size from which Ring is faster at every larger size)")
    for h in hosts:
        xs = [s for s in sizes if (h, "Ring", s) in med and (h, "Tree", s) in med]
        cross = None
        for i, s in enumerate(xs):
            if all(med[(h, "Ring", u)] < med[(h, "Tree", u)] for u in xs[i:]):
                cross = s
                break
        print(f"- {h} hosts: " + (f"{cross} B" if cross is not None else "none measured (Tree faster or equal at the largest size)"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/collplan-hosts-shape")
