#!/usr/bin/env bash
# run.sh — every GPU check of the CUDA backend in one bounded command (tests/gpu/README.md).
#
#   tests/gpu/run.sh --prepare [--build DIR]   on a machine with the CUDA Toolkit (no GPU needed):
#                                              configure and build DIR (default build/gpu) with only
#                                              what the GPU run needs; prints what to carry
#   tests/gpu/run.sh [--build DIR] [--out DIR] on the GPU machine: runs from the build in DIR (built
#                                              here if missing and cmake + nvcc exist); no compiler,
#                                              CMake, CTest or network needed
#
# Prints the environment (driver, runtime, devices, compute mode, MIG), ipc_probe's answers, every
# test's result on both CUDA paths (VMM and legacy IPC) and the latency figures of both, to stdout
# and, with --out, to DIR/run.log (plus one log per test); with --out it then writes
# DIR/summary.txt (the result and its reasons, driver and device facts, PASS/FAIL/ANSWER per probe,
# one line per case with its VMM and legacy verdicts side by side, the latency p50s of both paths
# and their ratio vmm/legacy) and DIR/gpu-run.tar.gz (every log), whatever the outcome, 77
# included. One global timeout (IPCRING_GPU_TIMEOUT, default 400 s, at most 420) and a timeout per
# test, cut to the time left; the slow reader_killed_* cases run on VMM, and on legacy only where
# the time left allows (the summary names any case not run). Exit 0: all passed; 77: no GPU here
# (the reason is printed; nothing was verified on a GPU); 1: a failure (a case not run for lack of
# time counts as one, except the legacy runs of the slow cases), including a driver too old for
# this build's CUDA runtime.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${IPCRING_GPU_BUILD_DIR:-$root/build/gpu}
out=""
prepare=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --prepare) prepare=1; shift ;;
    *) echo "usage: $0 [--prepare] [--build DIR] [--out DIR]" >&2; exit 2 ;;
  esac
done
[[ $build = /* ]] || build=$PWD/$build
targets=(ipcring_gpu_tests ipc_probe ipcring_cuda_unit_tests ipcring_cuda)

configure_and_build() {
  mkdir -p "$build" || return 1
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DIPCRING_WITH_CUDA=ON \
    -DIPCRING_BUILD_TESTS=ON -DIPCRING_BUILD_TOOLS=OFF -DIPCRING_BUILD_BENCH=OFF \
    -DIPCRING_PYTHON=AUTO >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; return 1; }
  cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}" \
    >"$build/build.log" 2>&1 || { tail -n 60 "$build/build.log"; return 1; }
  # The Python module, for python_cuda_frames.py (skipped where pybind11 is missing).
  cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" --target ipcring_python \
    >>"$build/build.log" 2>&1 || echo "(no Python module: python_cuda_frames.py will skip)"
}

# The Python check of the CUDA frame path (python_cuda_frames.py): exit 0, 77 (skipped) or 1;
# $1: its timeout (default 120 s).
run_python_check() {
  PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1 \
    timeout -k 5 "${1:-120}" "${IPCRING_GPU_PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}" "$root/tests/gpu/python_cuda_frames.py" \
    >"$logdir/python_cuda_frames.log" 2>&1
}

# The fake-CUDA test cases that failed (doctest's "TEST CASE:" line before each ERROR), one
# "FAILED: fake-CUDA test case: ..." line each, for the summary.
unit_failures() {
  awk '/^TEST CASE:/ { sub(/^TEST CASE: +/, ""); name = $0 }
       /: ERROR: / && name != "" && !(name in seen) { seen[name] = 1
         print "FAILED: fake-CUDA test case: " name }' "$logdir/cuda_unit.log"
}

if [[ $prepare -eq 1 ]]; then
  configure_and_build || exit 1
  echo "built $build; carry these (relative to the repository root):"
  for f in tests/gpu/ipcring_gpu_tests tests/gpu/ipc_probe tests/ipcring_cuda_unit_tests \
           lib/libipcring_cuda.so python/ipcring; do
    [[ -e $build/$f ]] && du -sh "$build/$f" | sed "s|$root/||"
  done
  exit 0
fi

# The one-screen summary of a run, from DIR/run.log: what the result was and why, the driver and
# device facts, one line per probe answer and per test, the latency figures.
write_summary() {
  local rc=$1 log=$out/run.log what
  case $rc in
    0) what="PASSED" ;;
    77) what="SKIPPED (77): nothing was verified on a GPU" ;;
    *) what="FAILED (exit $rc)" ;;
  esac
  echo "ipcring GPU run, $(date -u +%Y-%m-%dT%H:%M:%SZ): $what"
  grep -E '^(== )?(result|FAILED)' "$log" | sed -E 's/^(== )?/  /'
  echo "-- driver and devices"
  grep -E '^(NVRM version|CUDA_VISIBLE_DEVICES=|GPU [0-9]+: |[0-9]+, .*GPU-|device [0-9]+:|  attributes|ipc_probe: driver|nvidia-smi: )' \
    "$log" | head -n 16 | sed 's/^/  /'
  echo "-- ipc_probe"
  grep -E '^ipc_probe: ' "$log" | sed 's/^/  /' | cut -c1-200
  echo "-- tests"
  grep -m 1 -E '^every GPU case +SKIP' "$log" | sed 's/^/  /'
  grep -m 1 -E '^python_cuda_frames +(PASS|FAIL|SKIP)' "$log" | sed 's/^/  /'
  if [[ -s $out/verdicts.tsv ]]; then
    # One line per case: its verdict and seconds on each path, side by side.
    awk -F'\t' '
      { base = $1; path = "auto"; at = index($1, "@")
        if (at > 0) { base = substr($1, 1, at - 1); path = substr($1, at + 1) }
        if (!(base in seen)) { seen[base] = 1; order[++n] = base }
        cell[base, path] = $3 == "" ? $2 : sprintf("%s %s s", $2, $3) }
      END {
        printf "  %-26s %-26s %s\n", "case", "VMM", "legacy"
        for (i = 1; i <= n; i++) {
          b = order[i]
          if ((b, "auto") in cell) printf "  %-26s %s (Backend::cuda: the producer chose)\n", b, cell[b, "auto"]
          if ((b, "vmm") in cell || (b, "legacy") in cell)
            printf "  %-26s %-26s %s\n", b, cell[b, "vmm"], cell[b, "legacy"]
        } }' "$out/verdicts.tsv"
  fi
  grep -E '^not run for lack of time' "$log" | sed 's/^/  /'
  echo "-- latency (p50 of each run, legacy and VMM)"
  grep -E '^(legacy|vmm) +run [0-9]: latency \(' "$log" | sed 's/^/  /' | cut -c1-200
  grep -E '^latency p50 ' "$log" | sed 's/^/  /'
}

# ---- the run, under one global timeout ---------------------------------------------------------
budget=${IPCRING_GPU_TIMEOUT:-400}
(( budget > 420 )) && budget=420
if [[ "${IPCRING_GPU_RUN_INNER:-0}" != 1 ]]; then
  if [[ -n $out ]]; then
    mkdir -p "$out" || { echo "cannot create $out" >&2; exit 1; }
    out=$(cd "$out" && pwd)
  fi
  args=(--build "$build")
  [[ -n $out ]] && args+=(--out "$out")
  if [[ -n $out ]]; then
    IPCRING_GPU_RUN_INNER=1 timeout -k 10 "$budget" "$0" "${args[@]}" 2>&1 | tee "$out/run.log"
    rc=${PIPESTATUS[0]}
  else
    IPCRING_GPU_RUN_INNER=1 timeout -k 10 "$budget" "$0" "${args[@]}" 2>&1
    rc=$?
  fi
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    msg="== FAILED: the global timeout of ${budget} s expired"
    echo "$msg"
    [[ -n $out ]] && echo "$msg" >>"$out/run.log"
    rc=1
  fi
  if [[ -n $out ]]; then
    write_summary "$rc" >"$out/summary.txt"
    # Made outside DIR (an archive growing inside the directory it reads makes tar fail), then
    # moved in.
    archive=$(mktemp "${TMPDIR:-/tmp}/gpu-run.XXXXXX") &&
      tar -czf "$archive" -C "$out" --exclude=./gpu-run.tar.gz . &&
      chmod 644 "$archive" && mv "$archive" "$out/gpu-run.tar.gz" ||
      { echo "== could not write $out/gpu-run.tar.gz" | tee -a "$out/summary.txt"; rc=1; }
    echo "summary: $out/summary.txt; every log: $out/gpu-run.tar.gz"
  fi
  exit "$rc"
fi

section() { printf '\n== %s\n' "$*"; }
logdir=${out:-$(mktemp -d)}
mkdir -p "$logdir"
rm -f "$logdir/verdicts.tsv"  # this run's verdicts only (summary.txt's table)

section "environment"
date -u +"%Y-%m-%dT%H:%M:%SZ"
uname -srm
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 20 nvidia-smi --query-gpu=index,name,uuid,driver_version,compute_mode,mig.mode.current,memory.total \
    --format=csv 2>&1 || true
  timeout 20 nvidia-smi -L 2>&1 || true
else
  echo "nvidia-smi: not installed"
fi
[[ -r /proc/driver/nvidia/version ]] && head -n1 /proc/driver/nvidia/version
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"

bin=$build/tests/gpu/ipcring_gpu_tests
probe=$build/tests/gpu/ipc_probe
unit=$build/tests/ipcring_cuda_unit_tests
if [[ ! -x $bin || ! -x $probe ]]; then
  if command -v cmake >/dev/null 2>&1 && command -v nvcc >/dev/null 2>&1; then
    section "no build in $build: building it here"
    configure_and_build || { echo "== FAILED: the build"; exit 1; }
  else
    echo "== FAILED: no GPU test build in $build, and no cmake/nvcc here to make one"
    echo "   (on a machine with the CUDA Toolkit: tests/gpu/run.sh --prepare, then carry build/gpu)"
    exit 1
  fi
fi
export IPCRING_CUDA_PLUGIN=$build/lib/libipcring_cuda.so
ls -l "$IPCRING_CUDA_PLUGIN" 2>&1 | sed 's/^/module: /'

section "devices (ipcring_gpu_tests --probe)"
timeout -k 5 60 "$bin" --probe
probe_rc=$?
# Every case runs on both CUDA paths (`<case>@vmm`, `<case>@legacy`: the backend pinned, the
# readers check the path taken), plus `roundtrip` once with Backend::cuda (the producer's own
# choice, printed). In order of priority: every case on VMM (what Backend::cuda takes where the
# device offers it), the latency runs of both paths, the Python check, the fast cases on legacy,
# and last the slow cases on legacy (the reader_killed_* cases, up to ~60 s each: the victim's
# 60 s kernel may hold its exit) only where the time left allows it (`NOT RUN (time)` in the
# summary says which did not).
fast=(roundtrip slow_fill slow_reader_stream slow_reader_plain legacy_stream
      two_readers_one_process takeover uuid_visible neg_wait_on neg_release_fence release_elsewhere
      close_mapped peer_reader visible_devices vmm_pid_namespace latency)
slow=(reader_killed_plain reader_killed_stream reader_killed_successor)
first_fast=(roundtrip)
second_fast=()
for c in "${fast[@]}"; do first_fast+=("$c@vmm"); second_fast+=("$c@legacy"); done
first_slow=()
second_slow=()
for c in "${slow[@]}"; do first_slow+=("$c@vmm"); second_slow+=("$c@legacy"); done
if [[ $probe_rc -eq 77 ]]; then
  section "CUDA pool logic on the CPU (fake CUDA)"
  if [[ -x $unit ]]; then
    timeout -k 5 120 "$unit" >"$logdir/cuda_unit.log" 2>&1
    urc=$?
    tail -n 3 "$logdir/cuda_unit.log"
    if [[ $urc -ne 0 ]]; then
      unit_failures
      section "result: FAILED: the fake-CUDA tests"
      exit 1
    fi
  fi
  section "ipc_probe (no-GPU path)"
  timeout -k 5 60 "$probe"
  [[ $? -eq 77 ]] || { section "result: FAILED: ipc_probe did not skip"; exit 1; }
  section "GPU tests (no-GPU path: each must report itself skipped)"
  n=0
  for c in "${first_fast[@]}" "${first_slow[@]}" "${second_fast[@]}" "${second_slow[@]}"; do
    timeout -k 5 60 "$bin" "$c" >"$logdir/gpu_$c.log" 2>&1
    rc=$?
    printf '  %-32s %s\n' "$c" "$( [[ $rc -eq 77 ]] && echo SKIP || echo "FAIL (exit $rc)")"
    [[ $rc -eq 77 ]] || { cat "$logdir/gpu_$c.log"; section "result: FAILED: $c did not skip"; exit 1; }
    n=$((n + 1))
  done
  echo "every GPU case           SKIP (all $n, both paths)"
  section "Python CUDA frames (no-GPU path: must report itself skipped)"
  run_python_check
  prc=$?
  tail -n 1 "$logdir/python_cuda_frames.log"
  printf '%-24s %s\n' python_cuda_frames "$( [[ $prc -eq 77 ]] && echo SKIP || echo "FAIL (exit $prc)")"
  [[ $prc -eq 77 ]] || { cat "$logdir/python_cuda_frames.log"; section "result: FAILED: python_cuda_frames.py did not skip"; exit 1; }
  section "result: SKIPPED (exit 77): no usable GPU on this machine ($(head -n1 "$logdir/gpu_roundtrip.log" | sed 's/^SKIPPED: //')); nothing was verified on a GPU"
  exit 77
fi
if [[ $probe_rc -ne 0 ]]; then
  section "result: FAILED: the GPU probe failed (exit $probe_rc; a driver too old is a failure)"
  exit 1
fi

failed=0
section "ipc_probe: the CUDA facts the design relies on"
timeout -k 5 110 "$probe" 2>&1 | tee "$logdir/ipc_probe.log"
prc=${PIPESTATUS[0]}
[[ $prc -eq 0 ]] || { echo "ipc_probe: exit $prc"; failed=1; }

section "CUDA pool logic on the CPU (fake CUDA)"
if [[ -x $unit ]]; then
  timeout -k 5 120 "$unit" >"$logdir/cuda_unit.log" 2>&1
  urc=$?
  tail -n 3 "$logdir/cuda_unit.log"
  [[ $urc -eq 0 ]] || { unit_failures; failed=1; }
fi

# Seconds left of the global budget, less what the end needs (the summary, the archive).
time_left() { echo $(( budget - 15 - SECONDS )); }

# run_gpu_case CASE [required]: one case under its own timeout, cut to the time left; a case
# that no longer fits is `NOT RUN (time)`, a failure only when `required` (all but the slow cases
# on legacy).
not_run=()
run_gpu_case() {
  local c=$1 required=${2:-} limit=60 left start rc secs verdict
  [[ $c == reader_killed_* ]] && limit=170  # the victim's 60 s kernel may delay its exit
  left=$(time_left)
  if [[ $c == reader_killed_* ]] && (( left < 75 )) || (( left < 20 )); then
    verdict="NOT RUN (time: ${left} s left)"
    not_run+=("$c")
    [[ -n $required ]] && failed=1
    summary+=("$(printf '%-32s %s' "$c" "$verdict")")
    printf '%s\t%s\t\n' "$c" "$verdict" >>"$logdir/verdicts.tsv"
    printf '%-32s %s\n' "$c" "$verdict"
    return
  fi
  (( limit > left )) && limit=$left
  start=$(date +%s.%N)
  timeout -k 5 "$limit" "$bin" "$c" >"$logdir/gpu_$c.log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  case $rc in
    0) verdict=PASS
       grep -q '^ANSWER' "$logdir/gpu_$c.log" && verdict=ANSWER ;;
    77) verdict=SKIP ;;
    124|137) verdict="FAIL (per-test timeout)"; failed=1 ;;
    *) verdict="FAIL (exit $rc)"; failed=1 ;;
  esac
  summary+=("$(printf '%-32s %-24s %6s s' "$c" "$verdict" "$secs")")
  printf '%s\t%s\t%s\n' "$c" "$verdict" "$secs" >>"$logdir/verdicts.tsv"
  printf '%-32s %-24s %6s s\n' "$c" "$verdict" "$secs"
  grep -E '^(FAILED|SKIPPED|ANSWER|latency|kill:|negative control|victim:|reader:|producer|pid namespace)' \
    "$logdir/gpu_$c.log" | sed 's/^/    /'
  [[ $verdict == PASS || $verdict == SKIP || $verdict == ANSWER ]] ||
    tail -n 20 "$logdir/gpu_$c.log" | sed 's/^/    | /'
}

summary=()
section "GPU tests on the VMM path (and roundtrip with the producer's choice)"
for c in "${first_fast[@]}" "${first_slow[@]}"; do run_gpu_case "$c" required; done

# Latency on both paths, alternating so that drift of the machine hits both alike: the p50 of
# each of the 3 runs per path side by side and the ratio of the medians (VMM should be within
# 1.2x of legacy; not asserted: a figure, never a verdict).
section "latency (3 runs per path, alternating)"
p50_of() { sed -nE 's/.*p50 ([0-9.]+) us.*/\1/p' "$1" | head -n 1; }
declare -A p50s=([legacy]="" [vmm]="")
for i in 1 2 3; do
  for p in legacy vmm; do
    (( $(time_left) > 40 )) || { echo "latency: no time left for run $i on $p"; continue; }
    timeout -k 5 40 "$bin" "latency@$p" >"$logdir/latency_${p}_$i.log" 2>&1
    lrc=$?
    line=$(grep -E 'latency \(' "$logdir/latency_${p}_$i.log")
    printf '%-6s run %d: %s\n' "$p" "$i" "${line:-no latency line (exit $lrc)}" | tee -a "$logdir/latency.log"
    v=$(p50_of "$logdir/latency_${p}_$i.log")
    [[ -n $v ]] && p50s[$p]+="$v "
  done
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ml=$(median <<<"${p50s[legacy]}")
mv=$(median <<<"${p50s[vmm]}")
ratio=$(awk -v l="$ml" -v v="$mv" 'BEGIN { if (l > 0 && v != "") printf "%.2f", v / l; else print "n/a" }')
echo "latency p50 (us): legacy [ ${p50s[legacy]}] vmm [ ${p50s[vmm]}]; median legacy ${ml:-n/a}, vmm ${mv:-n/a}: vmm/legacy ${ratio} (target: within 1.2)"

section "Python CUDA frames (python_cuda_frames.py)"
py_limit=$(time_left)
(( py_limit > 120 )) && py_limit=120
if (( py_limit >= 20 )); then
  run_python_check "$py_limit"
  prc=$?
else
  echo "python_cuda_frames: no time left (${py_limit} s)" >"$logdir/python_cuda_frames.log"
  prc=124
fi
case $prc in
  0) verdict=PASS ;;
  77) verdict=SKIP ;;
  124|137) verdict="FAIL (timeout)"; failed=1 ;;
  *) verdict="FAIL (exit $prc)"; failed=1 ;;
esac
summary+=("$(printf '%-24s %-24s' python_cuda_frames "$verdict")")
printf '%-24s %s\n' python_cuda_frames "$verdict"
sed 's/^/    /' "$logdir/python_cuda_frames.log" | tail -n 20

section "GPU tests on the legacy CUDA IPC path (the slow cases where the time allows)"
for c in "${second_fast[@]}"; do run_gpu_case "$c" required; done
for c in "${second_slow[@]}"; do run_gpu_case "$c"; done
((${#not_run[@]})) && echo "not run for lack of time: ${not_run[*]}"

section "summary"
printf '%s\n' "${summary[@]}"
if [[ $failed -ne 0 ]]; then
  echo "result: FAILED (logs in $logdir)"
  exit 1
fi
echo "result: all GPU checks passed (logs in $logdir)"
exit 0
