#!/usr/bin/env bash
# The dependency patterns of NCCL's ring all-reduce (4 chunks and 1 chunk) and of OpenMPI's recursive
# doubling, alone, on 4 processes, with and without binding: the floor under any implementation of
# them on this host (see bench/sched-floor.c, docs/engine-vs-mpi.md); then NCCL's 4-chunk ring, bound,
# with the other waits tried for the engine (yield from the first failed poll, spin while the core's
# other rank waits too, sleep on a futex); last, the ring and recursive doubling on 2 processes, one per
# core (np 2's floor: the ring's 2 dependent hops against one exchange). Usage: bench/run-sched-floor.sh [reps]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${TMPDIR:-/tmp}/collplan-sched-floor
cc -O2 -o "$bin" "$here/sched-floor.c"
for ((i = 0; i < ${1:-3}; i++)); do
  for pat in ring chain rd; do
    for bind in none rr; do
      "$bin" "$pat" "$bind" 100000
    done
  done
done
for ((i = 0; i < ${1:-3}; i++)); do
  for wait in yield yield0 matespin futex; do
    iters=100000
    [ "$wait" = futex ] && iters=5000 # each iteration takes hundreds of microseconds
    "$bin" ring rr "$iters" "$wait"
  done
done
for ((i = 0; i < ${1:-3}; i++)); do
  for pat in ring rd; do
    "$bin" "$pat" rr 200000 yield 2
  done
done
