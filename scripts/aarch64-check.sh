#!/usr/bin/env bash
# Cross-compiles the library and the in-process protocol tests for aarch64 (Debian's
# g++-aarch64-linux-gnu; doctest is header-only, so the host's headers
# serve) and runs the slot-protocol and layout tests under qemu-user. The shared-memory layout's
# static_asserts are checked for aarch64 by the compile itself. The API and process suites are not
# run there: qemu-user does not implement the kernel's robust-futex list (set_robust_list), and
# the library's robust-mutex self-test rightly refuses to create channels under it.
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=aarch64-linux-gnu-g++
command -v "$cxx" >/dev/null && command -v qemu-aarch64 >/dev/null || {
  echo "aarch64-check: $cxx or qemu-aarch64 missing; skipped"; exit 0; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
ln -s /usr/include/doctest "$out/inc/doctest"
sources=(src/errors.cpp src/common/format.cpp src/common/naming.cpp src/producer/producer.cpp src/producer/producer_core.cpp
         src/reader/reader.cpp src/reader/reader_core.cpp src/reader/follow.cpp
         src/inspect.cpp src/tensor.cpp src/segment/segment.cpp
         src/channel/directory.cpp src/channel/name_lock.cpp src/channel/handout.cpp
         src/common/process.cpp src/ring/writer.cpp src/ring/cursor.cpp src/ring/observe.cpp
         src/lease/lease.cpp src/wait/futex.cpp src/backend/host/host_pool.cpp
         src/backend/cuda/cuda_unavailable.cpp tests/unit/main.cpp tests/unit/ring_test.cpp
         tests/unit/layout_test.cpp)
pids=()
for f in "${sources[@]}"; do
  "$cxx" -std=c++20 -O1 -Wall -Wextra -Werror -Iinclude -Isrc -Itests -Itools -idirafter "$out/inc" \
    -c "$f" -o "$out/$(echo "$f" | tr / _).o" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
"$cxx" -static -pthread "$out"/*.o -o "$out/protocol_tests" -lrt
file "$out/protocol_tests" | sed 's/,.*BuildID.*//'
qemu-aarch64 "$out/protocol_tests"
