#!/usr/bin/env python3
# Side-by-side collbench binaries across emulated hosts (issue 15; BENCHMARKS.md, "Quieter hosts"):
# each round runs every binary once, in order, with
#   collbench allreduce --hosts HOSTS -np HOSTS --algo ALGO -b 8 -e 4096 -f 8 -n 30 -w 3 -d float -o sum
# and COLLPLAN_NET_DELAY_US=DELAY (plus the binary's own ENV=V settings), then prints per binary the
# median over the rounds of the out-of-place and in-place times per size, us. Needs root.
# usage: bench/ab-hosts.py ROUNDS HOSTS ALGO DELAY "label:binary[:ENV=V ENV=V]" ...
import subprocess, sys, statistics, os
rounds, hosts, algo, delay = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
cfgs = []
for c in sys.argv[5:]:
    label, b, envs = (c.split(':', 2) + [''])[:3]
    cfgs.append((label, b, dict(e.split('=', 1) for e in envs.split() if e)))
res = {c[0]: {} for c in cfgs}
for r in range(rounds):
    for label, b, envs in cfgs:
        env = dict(os.environ, COLLPLAN_NET_DELAY_US=delay, **envs)
        out = subprocess.run([b, 'allreduce', '--hosts', hosts, '-np', hosts, '--algo', algo, '-b', '8', '-e', '4096', '-f', '8', '-n', '30', '-w', '3', '-d', 'float', '-o', 'sum'], env=env, capture_output=True, text=True)
        for line in out.stdout.splitlines():
            f = line.split()
            if line.startswith('#') or len(f) < 12: continue
            res[label].setdefault(int(f[0]), []).extend([float(f[5]), float(f[9])])
        if out.returncode: print(label, 'failed', out.stderr[-500:])
for label, d in res.items():
    print(f"{label:>10} h{hosts} {algo} d{delay}: " + " ".join(f"{s}:{statistics.median(v):.0f}" for s, v in sorted(d.items())))
