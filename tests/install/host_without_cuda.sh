#!/usr/bin/env bash
# host_without_cuda.sh SOURCE_DIR BINARY_DIR WORK_DIR — host users need no CUDA.
#
# 1. Installs the build into WORK_DIR/prefix and checks with readelf/nm that libipcring, ringpub,
#    ringsub, ringdump, the Python extension and the CUDA module libipcring_cuda.so need neither
#    libcudart nor libcuda (the module carries the CUDA runtime statically and loads the driver at
#    run time).
# 2. In a private mount namespace (unshare -m) with a tmpfs over every /usr/local/cuda* directory
#    (the CUDA Toolkit hidden, libcudart gone): configures, builds and runs a host-only consumer
#    against the installed package with find_package(ipcring CONFIG REQUIRED); runs ringpub and
#    ringsub against each other, ringdump, and the Python module; checks that Backend::cuda then
#    fails with Errc::unsupported and a message rather than a crash; and configures ipcring itself
#    with IPCRING_WITH_CUDA=AUTO (must succeed, backend OFF), builds its library, and with ON (must
#    fail).
# Exit 77 (skipped) where a mount namespace cannot be made (not root, or no unshare).
set -euo pipefail
src=$1 bin=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

if [[ "${IPCRING_INSIDE_NS:-0}" != 1 ]]; then
  cmake --install "$bin" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log"; fail "cmake --install"; }
  prefix=$work/prefix
  mapfile -t objects < <(find "$prefix" -type f \( -name 'ring*' -o -name '*.so' \) | sort)
  for f in "${objects[@]}"; do
    if readelf -d "$f" 2>/dev/null | grep -E 'NEEDED.*lib(cudart|cuda)\.so'; then
      fail "$f needs a CUDA library"
    fi
    echo "ok: $(basename "$f") needs no CUDA library"
  done
  lib=$(find "$prefix" -name libipcring.a | head -n1)
  [[ -n "$lib" ]] || fail "libipcring.a not installed"
  if nm -u "$lib" | grep -E ' (cuda|cu)[A-Z][A-Za-z0-9_]*$'; then
    fail "libipcring.a refers to CUDA symbols"
  fi
  echo "ok: libipcring.a refers to no CUDA symbol"
  if ! unshare -m true 2>/dev/null; then
    echo "SKIPPED: cannot create a mount namespace here (needs root and unshare)"
    exit 77
  fi
  exec unshare -m env IPCRING_INSIDE_NS=1 "$0" "$src" "$bin" "$work.ns"
fi

# ---- inside the mount namespace -------------------------------------------------------------
prefix=${work%.ns}/prefix
mount --make-rprivate /
hidden=0
for d in /usr/local/cuda /usr/local/cuda-*; do
  [[ -d "$d" && ! -L "$d" ]] || continue
  mount -t tmpfs -o size=1m tmpfs "$d"
  hidden=$((hidden + 1))
done
unset CUDA_PATH CUDA_HOME CUDAToolkit_ROOT CUDACXX
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if nvcc --version >/dev/null 2>&1 || ls /usr/local/cuda*/lib*/libcudart* >/dev/null 2>&1 ||
   [[ -n "$(ldconfig -p | awk '/libcudart/ {print $NF}' | xargs -r ls 2>/dev/null)" ]]; then
  fail "the CUDA Toolkit is still visible"
fi
echo "ok: CUDA Toolkit hidden ($hidden directories under a tmpfs; nvcc does not run, no libcudart)"

cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; fail "configuring the consumer"; }
cmake --build "$work/consumer" >>"$work/consumer.log" 2>&1 ||
  { cat "$work/consumer.log"; fail "building the consumer"; }
"$work/consumer/app" || fail "the consumer"
"$work/consumer/app" --cuda || fail "the consumer's Backend::cuda check"
# The module itself loads without the Toolkit (its CUDA runtime is static): asked for CUDA here, it
# answers from the runtime (no driver / no device), not from the loader.
plugin=$(find "$prefix" -name libipcring_cuda.so | head -n1)
if [[ -n "$plugin" ]]; then
  IPCRING_CUDA_PLUGIN=$plugin "$work/consumer/app" --cuda >"$work/cuda.log" 2>&1 ||
    { cat "$work/cuda.log"; fail "Backend::cuda through the installed module"; }
  cat "$work/cuda.log"
  if grep -q "could not be loaded" "$work/cuda.log"; then
    fail "the installed CUDA module did not load without the Toolkit"
  fi
  echo "ok: libipcring_cuda.so loads without the CUDA Toolkit"
fi

ch="nocuda-$$"
if [[ ! -x "$prefix/bin/ringpub" ]]; then
  echo "note: tools not installed (built without them); not checked"
else
"$prefix/bin/ringpub" "$ch" --slots 6 --readers 2 --frame-bytes 4096 --rate 200 --duration 3 \
  >"$work/ringpub.log" 2>&1 &
pub=$!
"$prefix/bin/ringsub" "$ch" --wait 5 --count 20 >"$work/ringsub.log" 2>&1 ||
  { cat "$work/ringpub.log" "$work/ringsub.log"; fail "ringsub"; }
"$prefix/bin/ringdump" list >"$work/ringdump.log" 2>&1 ||
  { cat "$work/ringdump.log"; fail "ringdump list"; }
wait "$pub" || { cat "$work/ringpub.log"; fail "ringpub"; }
echo "ok: ringpub, ringsub and ringdump ran ($(tail -n1 "$work/ringsub.log"))"
fi

py=$(find "$prefix" -type d -path '*-packages' | head -n1)
if [[ -n "$py" ]]; then
  PYTHONPATH=$py PYTHONDONTWRITEBYTECODE=1 python3 - "$ch-py" <<'PY' || fail "the Python module"
import sys, ipcring
name = sys.argv[1]
with ipcring.Producer(name, slots=4, max_readers=1, frame_bytes=64) as p:
    r = ipcring.Reader(name)
    p.send(b"hello")
    with r.read(timeout=1.0) as f:
        assert bytes(memoryview(f))[:5] == b"hello"
print("ok: the Python module read a frame without CUDA")
PY
else
  echo "note: no Python module installed (built without it); not checked"
fi

cmake -S "$src" -B "$work/auto" -DIPCRING_WITH_CUDA=AUTO -DIPCRING_BUILD_TESTS=OFF \
  -DIPCRING_BUILD_TOOLS=OFF -DIPCRING_BUILD_BENCH=OFF -DIPCRING_PYTHON=OFF \
  >"$work/auto.log" 2>&1 || { cat "$work/auto.log"; fail "configure with IPCRING_WITH_CUDA=AUTO"; }
grep -q "CUDA backend OFF" "$work/auto.log" || { cat "$work/auto.log"; fail "AUTO did not say OFF"; }
cmake --build "$work/auto" --target ipcring >"$work/auto-build.log" 2>&1 ||
  { cat "$work/auto-build.log"; fail "building libipcring without a Toolkit"; }
echo "ok: configured (AUTO -> CUDA backend OFF) and built libipcring without a CUDA Toolkit"
if cmake -S "$src" -B "$work/on" -DIPCRING_WITH_CUDA=ON -DIPCRING_BUILD_TESTS=OFF \
  -DIPCRING_BUILD_TOOLS=OFF -DIPCRING_BUILD_BENCH=OFF -DIPCRING_PYTHON=OFF >"$work/on.log" 2>&1; then
  fail "IPCRING_WITH_CUDA=ON configured without a CUDA Toolkit"
fi
echo "ok: IPCRING_WITH_CUDA=ON refuses to configure without a CUDA Toolkit"
echo "PASS: host users need no CUDA"
