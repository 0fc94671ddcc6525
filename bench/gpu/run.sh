#!/usr/bin/env bash
# The GPU checks of issues 16 and 17, prepared for a lent GPU machine (CUDA 13.0, PyTorch and NCCL there, no
# Go). Two halves:
#
#   bench/gpu/run.sh build    here: builds what the device needs into build/gpu (gitignored, about
#                             40 MiB): the kernels/cuda test binary, collbench, planner, the NCCL
#                             tuner+profiler library and an h200 table
#   bench/gpu/run.sh device   there (the device tool carries build/gpu): results under $OUT
#
# On the device it checks, and writes to $OUT:
#   1. nvidia-smi -L and the driver (nvidia-smi.txt);
#   2. the kernels with the device's own driver (kernels-cuda.txt): NVRTC compiles them for the
#      device's architecture (sm_90a on an H200) with the machine's CUDA 13.0 NVRTC
#      (COLLPLAN_NVRTC, else ldconfig, /usr/local/cuda*, or a pip nvidia/cu13 directory), the
#      driver loads the cubin and resolves every entry point (TestDeviceModule, which also reports
#      CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED); the broken-source and argument-layout checks
#      (TestCompileError, TestWorkLayout); the GPU correctness matrix (TestGPURing: the GPU
#      communicator's Ring for every collective and Tree for AllReduce, every protocol, 2, 4 and
#      8 ranks sharing the device, against the CPU engine on the same seeded inputs, exact); and
#      the busbw sweeps (TestGPUBusBW: AllReduce float32 sum with Ring and Tree and every protocol
#      on 2, 4 and 8 ranks, 8 B to 1 GiB by 4x with Simple and to 64 MiB with LL and LL128, out of
#      place and in place, one nccl-tests table per algorithm, protocol and rank count that
#      calibrate reads, in $OUT/tables). COLLPLAN_REQUIRE_CUDA=1 and COLLPLAN_REQUIRE_NVRTC=1 turn
#      any missing piece into a failure;
#   3. collbench --device cuda (collbench-cuda.txt): AllReduce float sum, 2 and 4 ranks sharing the
#      device, Ring/Simple and Tree/LL128, 8 B to 64 MiB, #wrong checked; exit status and the
#      table's last lines;
#   4. cudaMemcpy device-to-device through PyTorch, 8 B to 1 GiB by 4x (d2d.txt): the bound the
#      GPU communicator's busbw is to be read against;
#   5. the NCCL plugin suite (issue 17, plugin_check): PyTorch's NCCL on every GPU with the library as
#      tuner and profiler, TUNING lines against the table's picks, the dumps against the calls.
# Not yet: the GPU communicator (kernels/cuda.Comm) runs Ring and Tree only (no NVLS: no multicast
# objects yet); the NVLS kernels are only compiled and loaded. SUMMARY.txt says what ran and how it ended.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=$repo/build/gpu

build() {
  set -e
  mkdir -p "$bin"
  (cd "$repo" && CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$bin/cuda.test" ./kernels/cuda/)
  (cd "$repo" && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$bin/collbench" ./cmd/collbench)
  # The plugin check (issue 17): the NCCL tuner+profiler library and a table for the machine's
  # shape (one node of up to 8 GPUs; NCCL asks the tuner only with 2 or more ranks).
  (cd "$repo" && make -s shim && cp build/libnccl-tuner-collplan.so "$bin/")
  (cd "$repo" && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$bin/planner" ./cmd/planner &&
    "$bin/planner" compile --node h200 -o "$bin/h200.cptt" >/dev/null)
  ls -l "$bin"
}

# find_nvrtc prints the path of libnvrtc.so.13, or nothing.
find_nvrtc() {
  local p=${COLLPLAN_NVRTC:-}
  [ -n "$p" ] && { echo "$p"; return; }
  p=$(ldconfig -p 2>/dev/null | awk '/libnvrtc\.so\.13 /{print $NF; exit}')
  if [ -z "$p" ]; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 \
      $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null | sed 's|\([^ ]*\)|\1/nvidia/cu13/lib|g'); do
      [ -e "$d/libnvrtc.so.13" ] && { p=$d/libnvrtc.so.13; break; }
    done
  fi
  echo "$p"
}

device() {
  out=${OUT:?OUT must name the results directory}
  mkdir -p "$out"
  summary=$out/SUMMARY.txt
  : >"$summary"
  note() { echo "$*" | tee -a "$summary"; }
  nvidia-smi -L >"$out/nvidia-smi.txt" 2>&1
  nvidia-smi >>"$out/nvidia-smi.txt" 2>&1
  note "nvidia-smi: $(head -1 "$out/nvidia-smi.txt")"

  nvrtc=$(find_nvrtc)
  if [ -z "$nvrtc" ]; then
    note "kernels: no libnvrtc.so.13 found (ldconfig, /usr/local/cuda*, pip nvidia/cu13)"
  else
    inc=$(cd "$(dirname "$nvrtc")/.." && pwd)/include
    [ -e "$inc/cuda_fp16.h" ] || inc=/usr/local/cuda/include
    start=$(date +%s)
    COLLPLAN_NVRTC=$nvrtc COLLPLAN_CUDA_INCLUDE=$inc COLLPLAN_CACHE_DIR=$out/nvrtc-cache \
      COLLPLAN_REQUIRE_CUDA=1 COLLPLAN_REQUIRE_NVRTC=1 COLLPLAN_GPU_TABLES=$out/tables \
      timeout 240 "$bin/cuda.test" -test.v -test.count=1 -test.timeout 230s \
      -test.run 'TestDeviceModule|TestGPURing|TestGPUBusBW|TestCompileError|TestWorkLayout' \
      >"$out/kernels-cuda.txt" 2>&1
    rc=$?
    note "kernels: NVRTC $nvrtc, headers $inc: exit $rc in $(( $(date +%s) - start )) s; $(grep -c -- '--- PASS' "$out/kernels-cuda.txt") passed, $(grep -c -- '--- FAIL' "$out/kernels-cuda.txt") failed"
    grep -E 'device [0-9]+:|allreduce_.*busbw' "$out/kernels-cuda.txt" | sed 's/^ */  /' | tee -a "$summary"
    rm -rf "$out/nvrtc-cache"
  fi

  : >"$out/collbench-cuda.txt"
  for run in "2 Ring Simple" "4 Ring Simple" "4 Tree LL128"; do
    set -- $run
    timeout 120 "$bin/collbench" allreduce --device cuda -np "$1" --algo "$2" --proto "$3" -b 8 -e 64M -f 4 \
      -n 10 -w 2 >>"$out/collbench-cuda.txt" 2>&1
    note "collbench --device cuda -np $1 $2/$3: exit $? ($(grep -E 'Out of bounds|Avg bus' "$out/collbench-cuda.txt" | tail -2 | tr '\n' ' '))"
  done

  timeout 120 python3 - >"$out/d2d.txt" 2>&1 <<'PY'
import torch, time
print("# cudaMemcpy device-to-device (torch copy_), %s" % torch.cuda.get_device_name(0))
print("# bytes  time_us  GB/s (read+write counted once: bytes/time)")
dev = torch.device("cuda")
size = 8
while size <= 1 << 30:
    a = torch.empty(size, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    for _ in range(5):
        b.copy_(a)
    torch.cuda.synchronize()
    iters = 50 if size < (64 << 20) else 10
    t0 = time.perf_counter()
    for _ in range(iters):
        b.copy_(a)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / iters
    print("%d %.2f %.2f" % (size, dt * 1e6, size / dt / 1e9))
    del a, b
    size *= 4
PY
  note "d2d bound: exit $? ($(tail -1 "$out/d2d.txt"))"
  note "tables: $(ls "$out/tables" 2>/dev/null | wc -l) nccl-tests tables in tables/"
  plugin_check
  note "not run: NVLS on the GPU communicator (no multicast objects yet)"
}

# plugin_check: real NCCL (PyTorch's) on every GPU of the machine with the library as its tuner and
# profiler: TUNING lines must show the table's picks (planner show-decisions --log, the agreement
# line), and the profiler's dumps must hold every collective the job issued (one record per
# all_reduce of the loop). On one GPU NCCL's single-rank path asks no tuner: the script says so and
# checks only that the library loads and the dumps are written.
plugin_check() {
  local gpus ver dumps=$out/profile
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  ver=$(python3 -c 'import torch; print(".".join(map(str, torch.cuda.nccl.version())))' 2>/dev/null)
  note "plugin: $gpus GPU(s), PyTorch's NCCL $ver (the profiler ABI v5 needs 2.28 or newer)"
  mkdir -p "$dumps"
  cat >"$out/allreduce_loop.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
r = dist.get_rank(); torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
calls = 0
for size in [8 << k for k in range(0, 25, 2)]:  # 8 B .. 128 MiB by 4x
    x = torch.ones(size // 4, device="cuda")
    for _ in range(20):
        dist.all_reduce(x); calls += 1
torch.cuda.synchronize()
if r == 0:
    print("calls", calls)
dist.destroy_process_group()
PY
  NCCL_TUNER_PLUGIN=$bin/libnccl-tuner-collplan.so NCCL_PROFILER_PLUGIN=$bin/libnccl-tuner-collplan.so \
    COLLPLAN_TUNER_TABLE=$bin/h200.cptt COLLPLAN_PROFILE_DIR=$dumps NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,INIT \
    timeout 300 torchrun --standalone --nproc_per_node="$gpus" "$out/allreduce_loop.py" >"$out/nccl-plugin.txt" 2>&1
  note "plugin: torchrun exit $?, $(grep -c 'TUNING\|Tuner' "$out/nccl-plugin.txt") TUNING lines, $(grep -m1 '^calls' "$out/nccl-plugin.txt")"
  note "plugin: dumps $(ls "$dumps" | wc -l) files, $(cat "$dumps"/*.jsonl 2>/dev/null | grep -c '"type":"coll"') collective records"
  if [ "$gpus" -ge 2 ]; then
    "$bin/planner" show-decisions --log "$out/nccl-plugin.txt" --node h200 >"$out/show-decisions.txt" 2>&1
    note "plugin: show-decisions exit $? ($(grep -i -m1 'agree' "$out/show-decisions.txt"))"
  else
    note "plugin: one GPU: NCCL's single-rank path consults no tuner; checked only that the library loads and dumps"
  fi
}

case ${1:-} in
build) build ;;
device) device ;;
*)
  echo "usage: bench/gpu/run.sh build|device" >&2
  exit 2
  ;;
esac
