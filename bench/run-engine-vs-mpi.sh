#!/usr/bin/env bash
# collbench (engine, ranks as processes over /dev/shm) beside OpenMPI's MPI_Allreduce, float sum,
# 8 B to 256 MiB by x4, np 2 and 4, in one run on one machine, plus the DRAM bandwidth probe that
# gives the physical bound busbw <= B(N-1)/N^2. See docs/engine-vs-mpi.md.
# Usage: bench/run-engine-vs-mpi.sh [outdir]   (OpenMPI is installed from Debian when missing: root)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
peer=${COLLPLAN_PEER_BENCH:-/work/shared/bench}
out=${1:-${TMPDIR:-/tmp}/collplan-engine-vs-mpi}
maxb=${MAXBYTES:-268435456}
mkdir -p "$out"
cd "$root"
go build -o "$out/collbench" ./cmd/collbench

for t in 1 2; do
  OMP_NUM_THREADS=$t "$peer/run-membw.sh" 256 7 | tee "$out/membw-$t.txt"
done
for np in 2 4; do
  "$peer/run-mpi-allreduce.sh" "$np" 8 "$maxb" 7 | tee "$out/mpi-np$np.txt"
  # The MPI benchmark's statistic: per size, 7 repetitions (-N 7) of a timed loop whose length it
  # chooses (about 50 ms at 1 GB/s, at most 1000 calls), the time of the slowest rank (-a 3), and
  # the median of the 7. collbench-npN.txt keeps every repetition's row.
  : > "$out/collbench-np$np.txt"
  for r in "8 131072 1000 50" "524288 2097152 100 10" "8388608 $maxb 20 5"; do
    set -- $r
    [ "$1" -le "$maxb" ] || continue
    "$out/collbench" allreduce -np "$np" -b "$1" -e "$(( $2 < maxb ? $2 : maxb ))" -f 4 -n "$3" -w "$4" -a 3 -N 7 \
      -d float -o sum | tee -a "$out/collbench-np$np.txt"
  done
done

# The table: bytes, MPI time and busbw, collbench (out of place) time and busbw, ratios, bound.
triad=$(awk '/^triad/{print $2}' "$out/membw-2.txt")
for np in 2 4; do
  echo
  echo "np=$np  DRAM triad (2 threads) B=$triad GB/s  bound B(N-1)/N^2=$(awk -v b="$triad" -v n=$np 'BEGIN{printf "%.2f", b*(n-1)/(n*n)}') GB/s"
  echo "| bytes | MPI time (us) | MPI busbw | collbench time (us) | collbench busbw | time ratio (cb/MPI) | busbw ratio (cb/MPI) | cb busbw / bound |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  awk -v b="$triad" -v n=$np '
    FNR==1 { f++ }
    f==1 && $1 ~ /^[0-9]+$/ { mt[$1]=$4; mb[$1]=$8 }
    f==2 && $1 ~ /^[0-9]+$/ { if (!($1 in nt)) order[++k]=$1; t[$1, ++nt[$1]]=$6 }
    END {
      bound = b*(n-1)/(n*n)
      for (i=1; i<=k; i++) { s=order[i]; if (!(s in mt)) continue
        m=nt[s]; for (x=1; x<=m; x++) v[x]=t[s, x]
        for (x=2; x<=m; x++) { y=v[x]; z=x-1; while (z>0 && v[z]>y) { v[z+1]=v[z]; z-- } v[z+1]=y }
        ct[s] = (m%2 ? v[(m+1)/2] : (v[m/2]+v[m/2+1])/2)
        cb[s] = s/ct[s]/1e3*2*(n-1)/n
        printf "| %d | %.2f | %.3f | %.2f | %.3f | %.2f | %.2f | %.0f%% |\n", s, mt[s], mb[s], ct[s], cb[s], ct[s]/mt[s], (mb[s]>0 ? cb[s]/mb[s] : 0), 100*cb[s]/bound }
    }' "$out/mpi-np$np.txt" "$out/collbench-np$np.txt"
done | tee "$out/table.md"
