#!/usr/bin/env bash
# Load benchmark of planner serve on loopback (issue 14): Debian's wrk, -t1 -c64 -d10s, against the
# service and, in the same run, against bench/serve/bound (an empty JSON handler on the same Go HTTP
# stack) as the bound. Prints wrk's summaries and the numbers the issue asks for:
#   cached plan: requests/s and p99 against the bound's; batched plans: decisions/s; a cold explain
#   of a new class (menu + compile): p99; RSS after 10^6 requests over 10,000 distinct classes.
# Needs wrk (apt-get install -y wrk). Usage: bench/run-serve.sh [DURATION]   (default 10s)
set -euo pipefail
cd "$(dirname "$0")/.."
d=${1:-10s}
command -v wrk >/dev/null || { echo "run-serve: needs wrk (apt-get install -y wrk)"; exit 1; }
bin=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/planner ./bench/serve/bound
port=17480
start_planner() {
  "$bin/planner" serve --listen 127.0.0.1:$port 2>"$bin/serve.log" &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return; sleep 0.1; done
  echo "run-serve: planner serve did not become ready"; cat "$bin/serve.log"; exit 1
}
stop_planner() { kill "$pid"; wait "$pid" 2>/dev/null || true; }
"$bin/bound" --listen 127.0.0.1:17481 & bpid=$!
sleep 0.5
p99() { awk '$1 == "99%" { print $2 }'; }
rps() { awk '/^Requests\/sec/ { print $2 }'; }

echo "== bound: empty JSON handler, POST /v1/plan body"
wrk -t1 -c64 -d"$d" --latency -s bench/serve/plan.lua http://127.0.0.1:17481/v1/plan | tee "$bin/bound.txt"

start_planner
curl -sf -XPOST "http://127.0.0.1:$port/v1/plan" -d '{"node":"h100","coll":"allreduce","bytes":1048576}' >/dev/null
echo "== planner serve: cached plan"
wrk -t1 -c64 -d"$d" --latency -s bench/serve/plan.lua "http://127.0.0.1:$port/v1/plan" | tee "$bin/plan.txt"
echo "== planner serve: batches of 1,000 plans"
wrk -t1 -c64 -d"$d" --latency -s bench/serve/batch.lua "http://127.0.0.1:$port/v1/plan" | tee "$bin/batch.txt"
stop_planner

start_planner
echo "== planner serve: cold explain, a new class per request"
wrk -t1 -c64 -d"$d" --latency -s bench/serve/cold.lua "http://127.0.0.1:$port/v1/explain" | tee "$bin/cold.txt"
stop_planner
start_planner
echo "== planner serve: cold explain, one connection (the latency without queueing behind 63 others)"
wrk -t1 -c1 -d"$d" --latency -s bench/serve/cold.lua "http://127.0.0.1:$port/v1/explain" | tee "$bin/cold1.txt"
stop_planner

start_planner
echo "== planner serve: 10^6 plans over 10,000 classes"
left=1000000
while [ "$left" -gt 0 ]; do
  out=$(wrk -t1 -c64 -d5s -s bench/serve/classes.lua "http://127.0.0.1:$port/v1/plan")
  n=$(echo "$out" | awk '/requests in/ { print $1 }')
  left=$((left - n))
done
rss=$(awk '/^VmRSS/ { print $2 }' /proc/$pid/status)
hwm=$(awk '/^VmHWM/ { print $2 }' /proc/$pid/status)
stop_planner

br=$(rps <"$bin/bound.txt"); bp=$(p99 <"$bin/bound.txt")
pr=$(rps <"$bin/plan.txt"); pp=$(p99 <"$bin/plan.txt")
echo
echo "summary ($(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), wrk -t1 -c64 -d$d):"
echo "  bound:        $br req/s, p99 $bp"
echo "  cached plan:  $pr req/s ($(awk -v a="$pr" -v b="$br" 'BEGIN { printf "%.0f", 100*a/b }') % of the bound), p99 $pp"
echo "  batched plan: $(rps <"$bin/batch.txt") req/s x 1000 = $(awk -v a="$(rps <"$bin/batch.txt")" 'BEGIN { printf "%.0f", a*1000 }') decisions/s, p99 $(p99 <"$bin/batch.txt")"
echo "  cold explain: $(rps <"$bin/cold.txt") req/s, p99 $(p99 <"$bin/cold.txt"); one connection: p99 $(p99 <"$bin/cold1.txt")"
echo "  RSS after 10^6 plans over 10,000 classes: $((rss / 1024)) MiB (peak $((hwm / 1024)) MiB)"
