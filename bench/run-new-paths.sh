#!/usr/bin/env bash
# The engine's NVLS, NVLS_TREE and PAT paths beside Ring and Tree at the shapes where each is legal,
# alternated REPS times (bench/alternate.sh: medians of every reported time, out of place and in
# place, over every repetition), 16 B .. 256 MiB by 4x, Simple, one channel, shared-memory processes.
# Usage: bench/run-new-paths.sh [REPS] [COLLBENCH]   (defaults: 3, a fresh build in a temp dir)
set -euo pipefail
reps=${1:-3}
cb=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "$cb" ]; then
  d=$(mktemp -d)
  (cd "$here/.." && go build -o "$d/collbench" ./cmd/collbench)
  cb=$d/collbench
fi
sz="-b 16 -e 256M -f 4 -n 5 -w 2 -N 3 -c 0 --proto Simple --channels 1"
run() { # title, then label:args pairs
  echo "== $1"
  shift
  specs=()
  for s in "$@"; do specs+=("${s%%:*}:$cb ${s#*:} $sz"); done
  "$here/alternate.sh" "$reps" "${specs[@]}"
}
run "AllReduce, 2 ranks, one node" "ring:allreduce -np 2 --algo Ring" "tree:allreduce -np 2 --algo Tree" "nvls:allreduce -np 2 --algo NVLS"
run "AllReduce, 4 ranks, one node" "ring:allreduce -np 4 --algo Ring" "tree:allreduce -np 4 --algo Tree" "nvls:allreduce -np 4 --algo NVLS"
run "AllReduce, 4 ranks, 2 nodes of 2" "ring:allreduce -np 4 --ranks-per-node 2 --algo Ring" "tree:allreduce -np 4 --ranks-per-node 2 --algo Tree" "nvlstree:allreduce -np 4 --ranks-per-node 2 --algo NVLSTree"
run "AllGather, 4 ranks, one node" "ring:allgather -np 4 --algo Ring" "nvls:allgather -np 4 --algo NVLS"
run "AllGather, 4 ranks, 1 per node" "ring:allgather -np 4 --ranks-per-node 1 --algo Ring" "pat:allgather -np 4 --ranks-per-node 1 --algo PAT"
run "ReduceScatter, 2 ranks, 1 per node" "ring:reducescatter -np 2 --ranks-per-node 1 --algo Ring" "pat:reducescatter -np 2 --ranks-per-node 1 --algo PAT"
