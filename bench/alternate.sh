#!/usr/bin/env bash
# Alternate labelled collbench (or nccl-tests) commands REPS times and print, per label and size, the
# median of every time value they reported (out-of-place and in-place columns, every -N repetition),
# so that two builds or settings are compared side by side under the same host drift.
# Usage: bench/alternate.sh REPS 'label:command ...' 'label:command ...' ...
#   e.g. bench/alternate.sh 6 "old:/tmp/old/collbench allreduce -np 4 -b 8 -e 512 -f 4 -n 1000 -w 50 -a 3 -N 7" \
#                             "new:/tmp/new/collbench allreduce -np 4 -b 8 -e 512 -f 4 -n 1000 -w 50 -a 3 -N 7"
set -euo pipefail
reps=$1
shift
for ((i = 0; i < reps; i++)); do
  for spec in "$@"; do
    label=${spec%%:*}
    cmd=${spec#*:}
    bash -c "$cmd" | awk -v l="$label" '$1 ~ /^[0-9]+$/ && NF >= 10 { print l, $1, $6; print l, $1, $10 }'
  done
done | awk '
  { k = $1 " " $2; v[k] = v[k] " " $3; if (!(k in seen)) { seen[k] = 1; keys[++nk] = k } }
  END {
    for (i = 1; i <= nk; i++) {
      k = keys[i]; m = split(v[k], a, " ")
      for (x = 2; x <= m; x++) { y = a[x]; z = x - 1; while (z > 0 && a[z] + 0 > y + 0) { a[z+1] = a[z]; z-- } a[z+1] = y }
      printf "%s %.2f us (median of %d)\n", k, (m % 2 ? a[(m+1)/2] : (a[m/2] + a[m/2+1]) / 2), m
    }
  }' | sort -k2,2n -s
