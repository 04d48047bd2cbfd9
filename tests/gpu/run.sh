#!/usr/bin/env bash
# run.sh — builds and runs every GPU check of the CUDA backend and the GPU latency measurement, in
# one command, in well under 5 minutes on one GPU:
#
#   tests/gpu/run.sh            # build dir: build/gpu (override with IPCRING_GPU_BUILD_DIR)
#
# It configures a build with IPCRING_WITH_CUDA=ON, builds only the CUDA test targets, runs the
# CPU tests of the CUDA pool (fake CUDA), the GPU tests (label "gpu": separate producer and reader
# processes, kernels; the two-GPU cases skip on one GPU) and prints the latency from the producer's
# stream reaching publish to the reader's kernel start. Exit 0: all passed; 77: no GPU here (the
# GPU checks were skipped, nothing was verified on a GPU); anything else: a failure.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${IPCRING_GPU_BUILD_DIR:-$root/build/gpu}
jobs=$(nproc 2>/dev/null || echo 4)

echo "== configure ($build)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIPCRING_WITH_CUDA=ON \
  -DIPCRING_BUILD_TESTS=ON -DIPCRING_BUILD_TOOLS=OFF -DIPCRING_BUILD_BENCH=OFF \
  -DIPCRING_PYTHON=OFF >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }

echo "== build"
cmake --build "$build" -j"$jobs" --target ipcring_gpu_tests ipcring_cuda_unit_tests

bin="$build/tests/gpu/ipcring_gpu_tests"
echo "== GPUs"
set +e
"$bin" --probe
probe=$?
set -e

echo "== CUDA pool logic on the CPU (fake CUDA)"
ctest --test-dir "$build" -R '^cuda_unit$' --output-on-failure

if [[ $probe -eq 77 ]]; then
  echo "== no GPU on this machine: the GPU checks were SKIPPED (nothing verified on a GPU)"
  ctest --test-dir "$build" -L gpu || true
  exit 77
fi

echo "== GPU checks"
log="$build/gpu-tests.log"
set +e
ctest --test-dir "$build" -L gpu --timeout 180 -V >"$log" 2>&1
rc=$?
set -e
grep -E '^[0-9]+: (SKIPPED|FAILED|producer|reader|latency|[a-z_]+:)|Test +#|tests passed|tests failed' "$log" || true
if [[ $rc -ne 0 ]]; then
  echo "== GPU checks FAILED (full log: $log)"
  tail -n 200 "$log"
  exit 1
fi

echo "== latency (3 runs)"
for i in 1 2 3; do "$bin" latency | grep -E 'latency \(' || true; done
echo "== all GPU checks passed"
