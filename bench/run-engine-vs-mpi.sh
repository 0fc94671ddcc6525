#!/usr/bin/env bash
# collbench (engine, ranks as processes over /dev/shm) beside OpenMPI's MPI_Allreduce, float sum,
# 8 B to 128 MiB by x4, 1 KiB and 256 MiB, np 2 and 4, on one machine, plus the DRAM bandwidth probe that
# gives the physical bound busbw <= B(N-1)/N^2. See docs/engine-vs-mpi.md.
#
# The two are run REPS times (default 3), alternated (MPI np 2, collbench np 2, MPI np 4, collbench
# np 4, then again), so that the host's drift between runs (MPI's np 4 small-call time moves by
# 30-70 % from one run to the next here) falls on both; the table takes per size the median over
# the runs, and also prints the range of the per-run time ratios.
# Usage: bench/run-engine-vs-mpi.sh [outdir]   (OpenMPI is installed from Debian when missing: root)
#        TABLE_ONLY=1 bench/run-engine-vs-mpi.sh outdir   prints the table of an earlier run again
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
peer=${COLLPLAN_PEER_BENCH:-/work/shared/bench}
out=${1:-${TMPDIR:-/tmp}/collplan-engine-vs-mpi}
reps=${REPS:-3}
big=268435456
mkdir -p "$out"
cd "$root"
if [ -z "${TABLE_ONLY:-}" ]; then
go build -o "$out/collbench" ./cmd/collbench
for t in 1 2; do
  OMP_NUM_THREADS=$t "$peer/run-membw.sh" 256 7 | tee "$out/membw-$t.txt"
done
for ((rep = 1; rep <= reps; rep++)); do
  for np in 2 4; do
    {
      "$peer/run-mpi-allreduce.sh" "$np" 8 134217728 7
      "$peer/run-mpi-allreduce.sh" "$np" 1024 1024 7
      "$peer/run-mpi-allreduce.sh" "$np" "$big" "$big" 7
    } | tee "$out/mpi-np$np-run$rep.txt"
    # The MPI benchmark's statistic: per size, 7 repetitions (-N 7) of a timed loop whose length it
    # chooses (about 50 ms at 1 GB/s, at most 1000 calls), the time of the slowest rank (-a 3), and
    # the median of the 7. The file keeps every repetition's row.
    : > "$out/collbench-np$np-run$rep.txt"
    for r in "8 131072 4 1000 50" "1024 1024 4 1000 50" "524288 2097152 4 100 10" "8388608 134217728 4 20 5" "$big $big 2 5 2"; do
      set -- $r
      "$out/collbench" allreduce -np "$np" -b "$1" -e "$2" -f "$3" -n "$4" -w "$5" -a 3 -N 7 \
        -d float -o sum | tee -a "$out/collbench-np$np-run$rep.txt"
    done
  done
done
fi

# The table: bytes, MPI time and busbw, collbench (out of place) time and busbw, ratios, bound.
triad=$(awk '/^triad/{print $2}' "$out/membw-2.txt")
for np in 2 4; do
  echo
  echo "np=$np  DRAM triad (2 threads) B=$triad GB/s  bound B(N-1)/N^2=$(awk -v b="$triad" -v n=$np 'BEGIN{printf "%.2f", b*(n-1)/(n*n)}') GB/s  runs=$reps"
  echo "| bytes | MPI time (us) | MPI busbw | collbench time (us) | collbench busbw | time ratio (cb/MPI) | per-run time ratios | busbw ratio (cb/MPI) | cb busbw / bound |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for ((rep = 1; rep <= reps; rep++)); do
    echo "mpi $rep $out/mpi-np$np-run$rep.txt"
    echo "cb $rep $out/collbench-np$np-run$rep.txt"
  done | awk -v b="$triad" -v n=$np '
    function median(list,    m, v, x, y, z) {
      m = split(list, v, " ")
      for (x = 2; x <= m; x++) { y = v[x]; z = x - 1; while (z > 0 && v[z] + 0 > y + 0) { v[z+1] = v[z]; z-- } v[z+1] = y }
      return m % 2 ? v[(m+1)/2] : (v[m/2] + v[m/2+1]) / 2
    }
    {
      kind = $1; rep = $2; file = $3
      while ((getline line < file) > 0) {
        split(line, f, " ")
        if (f[1] !~ /^[0-9]+$/) continue
        s = f[1]
        if (!(s in seen)) { seen[s] = 1; order[++k] = s }
        if (kind == "mpi") { mt[s] = mt[s] " " f[4]; mrun[s, rep] = f[4] }
        else { ct[s] = ct[s] " " f[6]; crun[s, rep] = crun[s, rep] " " f[6] }
      }
      close(file)
      if (rep > reps) reps = rep
    }
    END {
      bound = b*(n-1)/(n*n)
      for (x = 2; x <= k; x++) { y = order[x]; z = x - 1; while (z > 0 && order[z] + 0 > y + 0) { order[z+1] = order[z]; z-- } order[z+1] = y }
      for (i = 1; i <= k; i++) { s = order[i]; if (!(s in mt) || !(s in ct)) continue
        m = median(mt[s]); c = median(ct[s])
        mb = s/m/1e3*2*(n-1)/n; cb = s/c/1e3*2*(n-1)/n
        lo = 1e9; hi = 0
        for (r = 1; r <= reps; r++) if ((s, r) in mrun && (s, r) in crun) {
          q = median(crun[s, r]) / mrun[s, r]; if (q < lo) lo = q; if (q > hi) hi = q }
        printf "| %d | %.2f | %.3f | %.2f | %.3f | %.2f | %.2f-%.2f | %.2f | %.0f%% |\n", s, m, mb, c, cb, c/m, lo, hi, cb/mb, 100*cb/bound }
    }'
done | tee "$out/table.md"
