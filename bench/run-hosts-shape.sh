#!/usr/bin/env bash
# The seed's shape across emulated hosts (issue 15): pinned Ring and Tree AllReduce (float sum), one
# rank per host, across 2, 4 and 8 emulated hosts (collbench --hosts: network namespaces on this
# machine), with COLLPLAN_NET_DELAY_US (default 200) of injected latency per frame, 8 B to 16 MiB by
# x2; REPS rounds (default 3), alternating hosts and algorithms within each round so that the
# machine's drift falls on all of them. Then bench/hosts-shape.py fits small-message time against
# N (Ring) and log2 N (Tree) and finds each host count's Tree-to-Ring crossover.
# Needs root (network namespaces). Usage: bench/run-hosts-shape.sh [outdir]
#        TABLE_ONLY=1 bench/run-hosts-shape.sh outdir   analyses an earlier run again
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${TMPDIR:-/tmp}/collplan-hosts-shape}
reps=${REPS:-3}
delay=${COLLPLAN_NET_DELAY_US:-200}
hosts=${HOSTS:-2 4 8}
mkdir -p "$out"
cd "$root"
if [ -z "${TABLE_ONLY:-}" ]; then
  go build -o "$out/collbench" ./cmd/collbench
  for ((rep = 1; rep <= reps; rep++)); do
    for h in $hosts; do
      for algo in Ring Tree; do
        f="$out/h$h-$algo-run$rep.txt"
        {
          COLLPLAN_NET_DELAY_US=$delay "$out/collbench" allreduce --hosts "$h" -np "$h" --algo "$algo" \
            -b 8 -e 4096 -f 2 -n 20 -w 3 -d float -o sum
          COLLPLAN_NET_DELAY_US=$delay "$out/collbench" allreduce --hosts "$h" -np "$h" --algo "$algo" \
            -b 8192 -e 16777216 -f 2 -n 5 -w 1 -d float -o sum
        } > "$f" 2> "$f.err" || { echo "failed: $f (see $f.err)" >&2; exit 1; }
        echo "$f"
      done
    done
  done
fi
python3 "$root/bench/hosts-shape.py" "$out"
