#!/usr/bin/env bash
# Installs what is missing, builds and runs every test: the asan (ASan+UBSan) build, the tsan build
# of the thread stress test, the protocol model, the fuzz targets, clang-tidy, and last the default
# build with warnings as errors, so the output ends with CTest's summary.
# IPCRING_TEST_QUICK=1: only the default build's suite.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
scripts/install-deps.sh
section() { printf '\n==== %s\n' "$*"; }

if [[ "${IPCRING_TEST_QUICK:-0}" != 1 ]]; then
  section "asan: ASan+UBSan build, whole suite (the crash torture three times)"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j"$jobs"
  # The MCAP and Foxglove checks drive the tools from node and Chromium and check their output
  # against other projects' readers: they run in the default build below; under ASan the same C++
  # code runs in mcap_unit and the tools suite.
  ASAN_OPTIONS=detect_leaks=1 ctest --preset asan -j2 -E '^(foxglove_serve|mcap_record|mcap_drops)$'
  for i in 2 3; do ctest --test-dir build/asan -L stress --output-on-failure; done

  section "tsan: thread stress over one mapping"
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j"$jobs" --target ipcring_stress_tests
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    build/tsan/tests/ipcring_stress_tests -tc="thread stress*"

  section "model: spin on the slot and lease protocol (and a broken variant that must fail)"
  model/check.sh

  section "fuzz: libFuzzer targets over segment validation and descriptor decoding"
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j"$jobs"
  ctest --test-dir build/fuzz -L fuzz --output-on-failure

  section "aarch64: the library and protocol tests cross-built, run under qemu-user"
  scripts/aarch64-check.sh

  section "clang-tidy"
  scripts/tidy.sh
fi

section "default build (warnings as errors): whole suite (the crash torture three times)"
cmake --preset ci >/dev/null
cmake --build --preset ci -j"$jobs"
for i in 1 2; do ctest --test-dir build/ci -L stress --output-on-failure; done
ctest --preset ci -j2
