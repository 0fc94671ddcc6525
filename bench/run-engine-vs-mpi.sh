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
  "$out/collbench" allreduce -np "$np" -b 8 -e "$maxb" -f 4 -n 20 -w 5 -d float -o sum | tee "$out/collbench-np$np.txt"
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
    f==2 && $1 ~ /^[0-9]+$/ { ct[$1]=$6; cb[$1]=$8; order[++k]=$1 }
    END {
      bound = b*(n-1)/(n*n)
      for (i=1; i<=k; i++) { s=order[i]; if (!(s in mt)) continue
        printf "| %d | %.2f | %.3f | %.2f | %.3f | %.2f | %.2f | %.0f%% |\n", s, mt[s], mb[s], ct[s], cb[s], ct[s]/mt[s], (mb[s]>0 ? cb[s]/mb[s] : 0), 100*cb[s]/bound }
    }' "$out/mpi-np$np.txt" "$out/collbench-np$np.txt"
done | tee "$out/table.md"
