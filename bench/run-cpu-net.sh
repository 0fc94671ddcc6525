#!/usr/bin/env bash
# Fits the cpu-net node table (issue 15): calibrate --node cpu-net --run --transport net sweeps every
# legal AllReduce cell (Ring and Tree, LL and Simple) and the free choice across 2, 4 and 8 emulated
# hosts, one rank each, with COLLPLAN_NET_DELAY_US (default 200) injected; then fits 2 and 4 hosts
# together and predicts 8 (--holdout-nodes 8: the prediction error at 8 hosts, which the fit never
# saw), and writes the overlay fitted on 2 and 4 with its cells predicted at 8 (--predict-nodes 8).
# Needs root (network namespaces). Usage: bench/run-cpu-net.sh [outdir]   (FIT_ONLY=1: refit an earlier run;
# ITERS, WARMUP, REPEAT: collbench -n, -w and calibrate --repeat, default 10, 2, 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${TMPDIR:-/tmp}/collplan-cpu-net}
export COLLPLAN_NET_DELAY_US=${COLLPLAN_NET_DELAY_US:-200}
mkdir -p "$out"
cd "$root"
go build -o "$out/bin/" ./cmd/calibrate ./cmd/collbench
if [ -z "${FIT_ONLY:-}" ]; then
  for h in 2 4 8; do
    rm -rf "$out/h$h"
    "$out/bin/calibrate" --node cpu-net --run --transport net --nodes "$h" --colls allreduce \
      --min 8 --max 1M --factor 4 --iters "${ITERS:-10}" --warmup "${WARMUP:-2}" --repeat "${REPEAT:-2}" --no-progress \
      --sweeps-out "$out/h$h" --out "$out/h$h.fit.toml" > "$out/h$h.report.txt"
  done
fi
# One manifest over the 2- and 4-host sweeps (and one over all three, for the holdout).
for set in "2 4" "2 4 8"; do
  name=$(echo "$set" | tr ' ' '-')
  man="$out/sweeps-$name.toml"
  echo "# calibrate --run --transport net sweeps at $set emulated hosts (bench/run-cpu-net.sh)" > "$man"
  for h in $set; do
    sed -n '/^\[\[sweep\]\]/,$p' "$out/h$h/sweeps.toml" | sed "s|^file = \"|file = \"h$h/|" >> "$man"
  done
done
"$out/bin/calibrate" --node cpu-net --sweeps "$out/sweeps-2-4-8.toml" --holdout-nodes 8 \
  --out "$out/holdout.fit.toml" > "$out/holdout.report.txt"
"$out/bin/calibrate" --node cpu-net --sweeps "$out/sweeps-2-4.toml" --predict-nodes 8 \
  --out "$out/cpu-net.fit.toml" > "$out/fit.report.txt"
grep -iE "held-out|holdout|median" "$out/holdout.report.txt" | head -20
echo "overlay: $out/cpu-net.fit.toml (copy to tables/ to ship it)"
