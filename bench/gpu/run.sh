#!/usr/bin/env bash
# The GPU checks of issue 16, prepared for a lent GPU machine (CUDA 13.0, PyTorch and NCCL there, no
# Go). Two halves:
#
#   bench/gpu/run.sh build    here: builds what the device needs into build/gpu (gitignored): the
#                             kernels/cuda test binary and collbench
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
#      GPU communicator's busbw is to be read against.
# Not yet: the GPU communicator (kernels/cuda.Comm) runs Ring and Tree only (no NVLS: no multicast
# objects yet); the NVLS kernels are only compiled and loaded. SUMMARY.txt says what ran and how it ended.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=$repo/build/gpu

build() {
  set -e
  mkdir -p "$bin"
  (cd "$repo" && CGO_ENABLED=0 go test -c -o "$bin/cuda.test" ./kernels/cuda/)
  (cd "$repo" && CGO_ENABLED=0 go build -o "$bin/collbench" ./cmd/collbench)
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
  note "not run: NVLS on the GPU communicator (no multicast objects yet)"
}

case ${1:-} in
build) build ;;
device) device ;;
*)
  echo "usage: bench/gpu/run.sh build|device" >&2
  exit 2
  ;;
esac
