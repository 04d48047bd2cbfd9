#!/usr/bin/env bash
# Installs the Debian packages ipcring needs that are missing. Idempotent; quiet when all are there.
# Usage: scripts/install-deps.sh [--minimal]   (--minimal: only what the library, tools and C++
# tests need; without it also Python/PyTorch, iceoryx, spin, clang fuzzing and plotting, and
# what scripts/test.sh itself calls: file (aarch64-check.sh), git (tidy.sh))
set -euo pipefail

core=(cmake g++ make pkg-config doctest-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev)
core+=(libzstd-dev liblz4-dev zlib1g-dev)  # ringdump record/play: MCAP chunk compression, CRC-32
core+=(libboost-dev)  # ringdump serve: Boost.Beast (WebSocket, HTTP); ringbench's message_queue baseline
extra=(clang libclang-rt-14-dev clang-tidy spin python3-dev pybind11-dev libdlpack-dev
       python3-numpy python3-pytest python3-torch iceoryx libiceoryx-posh-dev
       libiceoryx-hoofs-dev gnuplot-nox g++-aarch64-linux-gnu qemu-user file git)
extra+=(cyclonedds-dev cyclonedds-tools)  # ringbridge: Cyclone DDS, idlc, ddsperf
extra+=(libboost-dev)  # ringbench's Boost.Interprocess message_queue baseline (the library needs no Boost)
# The MCAP and Foxglove tests (tests/tools/mcap): node with npm (npm ci of the test's lock file).
# A node that brings its own npm (NodeSource's nodejs) must not get Debian's npm beside it.
extra+=(nodejs chromium)  # chromium: the screenshot of ringdump serve's page
command -v npm >/dev/null 2>&1 || extra+=(npm)
want=("${core[@]}")
[[ "${1:-}" == "--minimal" ]] || want+=("${extra[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
