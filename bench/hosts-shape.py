#!/usr/bin/env python3
"""Analyses bench/run-hosts-shape.sh's tables: per (hosts, algorithm, size) the median over the
rounds of the out-of-place time; a least-squares line of small-message time (8 B to 4 KiB)
against N for Ring and against log2 N for Tree, with R^2 per size; and per host count the
Tree-to-Ring crossover: the smallest size from which Ring's median time is below Tree's at that
size and every larger one. With --svg FILE, also a plot of the medians (time against size, log-log,
Ring solid and Tree dashed, one colour per host count). Usage: hosts-shape.py OUTDIR [--svg FILE]"""
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


def main(out, plot=None):
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
    if plot:
        svg(med, hosts, sizes, plot, f"Pinned Ring and Tree AllReduce across emulated hosts, 200 us injected ({rounds} rounds, medians)")
        print(f"\nplot: {plot}")


def svg(med, hosts, sizes, path, title):
    """Writes the medians as an SVG plot (plain SVG, no library)."""
    W, H, L, R, T, B = 720, 440, 70, 150, 40, 50
    ts = [v for v in med.values() if v > 0]
    x0, x1 = math.log2(min(sizes)), math.log2(max(sizes))
    y0, y1 = math.floor(math.log10(min(ts))), math.ceil(math.log10(max(ts)))
    X = lambda s: L + (math.log2(s) - x0) / (x1 - x0) * (W - L - R)
    Y = lambda t: H - B - (math.log10(t) - y0) / (y1 - y0) * (H - T - B)
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for e in range(y0, y1 + 1):
        y = Y(10 ** e)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
    for s in sizes[::2]:
        x = X(s)
        label = f"{s >> 20}M" if s >= 1 << 20 else f"{s >> 10}K" if s >= 1024 else f"{s}"
        out.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{H - B}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{H - B + 16}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">AllReduce size (bytes)</text>')
    out.append(f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" text-anchor="middle">time (us)</text>')
    for i, h in enumerate(hosts):
        c = colours[i % len(colours)]
        for a, dash in (("Ring", ""), ("Tree", ' stroke-dasharray="6 4"')):
            pts = [(X(s), Y(med[(h, a, s)])) for s in sizes if (h, a, s) in med]
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        ly = T + 20 + 36 * i
        out.append(f'<line x1="{W - R + 12}" y1="{ly}" x2="{W - R + 40}" y2="{ly}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{W - R + 46}" y="{ly + 4}">Ring, {h} hosts</text>')
        out.append(f'<line x1="{W - R + 12}" y1="{ly + 16}" x2="{W - R + 40}" y2="{ly + 16}" stroke="{c}" stroke-width="2" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{W - R + 46}" y="{ly + 20}">Tree, {h} hosts</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    plot = None
    if "--svg" in args:
        i = args.index("--svg")
        plot = args[i + 1]
        del args[i:i + 2]
    main(args[0] if args else "/tmp/collplan-hosts-shape", plot)
