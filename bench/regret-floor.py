#!/usr/bin/env python3
"""The noise floor of calibrate's regret statistic on this host.

Given two sweep directories of one shape written by `calibrate --run --sweeps-out DIR` (each cell's
nccl-tests table, NAME = COLL-ALGO-PROTO.txt; the -free tables are skipped), this takes per
collective and size the cell that was fastest in the first run (in-place times, as calibrate fits
them) and scores it on the second: regret = t2(that cell) / min over cells of t2 - 1. It is the
regret of a policy that knows the first run's every measurement exactly, so no fitted table can be
expected to score below it on a fresh sweep of this host. Usage:

    bench/regret-floor.py DIR_A DIR_B     (and DIR_B DIR_A for the other direction)
"""
import glob
import math
import os
import statistics
import sys


def load(d):
    t = {}
    files = glob.glob(os.path.join(d, "*.txt"))
    if not files:
        sys.exit("regret-floor: %s: no sweep tables (*.txt)" % d)
    for f in files:
        coll, _, cell = os.path.basename(f)[:-4].partition("-")
        if cell == "free":
            continue
        for n, line in enumerate(open(f), 1):
            if line.startswith("#") or not line.strip():
                continue
            p = line.split()
            try:
                size, ip = int(p[0]), float(p[9])
            except (IndexError, ValueError):
                sys.exit("regret-floor: %s:%d: not an nccl-tests row: %r" % (f, n, line.strip()))
            if size > 0:
                t.setdefault(coll, {}).setdefault(size, {})[cell] = ip
    return t


def p90(xs):
    xs = sorted(xs)
    return xs[math.ceil(0.9 * len(xs)) - 1]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = load(sys.argv[1]), load(sys.argv[2])
    every = []
    for coll in sorted(a):
        rs = []
        for size, ta in sorted(a[coll].items()):
            tb = b.get(coll, {}).get(size, {})
            cells = [c for c in ta if c in tb]
            if len(cells) < 2:
                continue
            best = min(cells, key=lambda c: ta[c])
            rs.append(tb[best] / min(tb[c] for c in cells) - 1)
        if not rs:
            continue
        every += rs
        print("%-14s sizes %3d  median %5.1f %%  p90 %5.1f %%  max %7.1f %%"
              % (coll, len(rs), 100 * statistics.median(rs), 100 * p90(rs), 100 * max(rs)))
    if not every:
        sys.exit("regret-floor: no size has two cells measured in both directories")
    print("%-14s sizes %3d  median %5.1f %%  p90 %5.1f %%  max %7.1f %%"
          % ("all", len(every), 100 * statistics.median(every), 100 * p90(every), 100 * max(every)))


main()
