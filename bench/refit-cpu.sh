#!/usr/bin/env bash
# Refit the cpu table's overlay on this host and check it on fresh sweeps: every cell
# `calibrate --run` sweeps at the four shapes the engine's paths need (1 x 2: NVLS; 2 x 2: NVLS_TREE,
# CollNetDirect, CollNetChain; 2 x 1 and 4 x 1: PAT, CollNetDirect, CollNetChain; Ring and Tree at
# all), all five collectives, 8 B..MAX, ranks as processes over /dev/shm, starting from the table
# alone (calibrate's prior), one shape after another into one overlay (each run keeps the other
# shapes' cells). Then every shape again, as a check on fresh sweeps of the overlay just written.
# Run it on a quiet host: nothing else should compete for the cores.
#
# Usage: bench/refit-cpu.sh OUTDIR   (REPEAT=3 MAX=64M; CHECK_ONLY=1 checks OUTDIR/cpu.fit.toml again;
#        SHAPES="4 4" fits and checks those shapes only, "NP GPN" pairs separated by commas; ADD=1
#        keeps the cells of an OUTDIR/cpu.fit.toml already there, such as a copy of the shipped one)
# Writes OUTDIR/cpu.fit.toml (copy it to tables/cpu.fit.toml to ship it), OUTDIR/fit-NPxGPN/ and
# OUTDIR/check-NPxGPN/ (the sweeps), and OUTDIR/*.log (each run's report, with its wall time).
set -euo pipefail
out=${1:?usage: bench/refit-cpu.sh OUTDIR}
repeat=${REPEAT:-3}
max=${MAX:-64M}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
(cd "$here/.." && go build -o "$out/bin/" ./cmd/calibrate ./cmd/collbench)
b=$out/bin
common=(--node cpu --run --transport shm --repeat "$repeat" --max "$max" --collbench "$b/collbench" --out "$out/cpu.fit.toml")
shapes=("2 2" "4 2" "2 1" "4 1") # np, ranks per node: 1 x 2, 2 x 2, 2 x 1, 4 x 1
if [ -n "${SHAPES:-}" ]; then
  IFS=, read -r -a shapes <<<"$SHAPES"
fi
step() { # label, then calibrate's arguments
  local label=$1 s
  shift
  s=$(date +%s)
  "$b/calibrate" "$@" >"$out/$label.log" 2>&1 || { echo "$label: failed, see $out/$label.log" >&2; exit 1; }
  echo "$label: $(($(date +%s) - s)) s"
}
if [ -z "${CHECK_ONLY:-}" ]; then
  [ -n "${ADD:-}" ] || rm -f "$out/cpu.fit.toml"
  for s in "${shapes[@]}"; do # each shape's run keeps the cells of the shapes before it
    set -- $s
    rm -rf "$out/fit-$1x$2"
    step "fit-$1x$2" "${common[@]}" --np "$1" --gpus-per-node "$2" --sweeps-out "$out/fit-$1x$2"
  done
fi
for s in "${shapes[@]}"; do
  set -- $s
  rm -rf "$out/check-$1x$2"
  step "check-$1x$2" "${common[@]}" --np "$1" --gpus-per-node "$2" --check "$out/check-$1x$2"
done
