#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy: bugprone-*, concurrency-*, warnings as errors) over the project's
# C++ sources, using the compile commands of a configure-only build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build/tidy -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DIPCRING_PYTHON=OFF \
  -DIPCRING_WITH_CUDA=OFF >/dev/null
mapfile -t files < <(git ls-files 'src/*.cpp' 'tools/*.cpp' 'bench/*.cpp' 'tests/*.cpp' 'python/src/*.cpp' \
  | grep -v -e '^tests/fuzz/' -e '^tests/gpu/' -e '_cudart\.cpp$' -e '^python/')
runner=$(command -v run-clang-tidy-14 || command -v run-clang-tidy || true)
if [[ -n "$runner" ]]; then
  "$runner" -quiet -p build/tidy -j "$(nproc)" "${files[@]}"
else
  status=0
  for f in "${files[@]}"; do clang-tidy --quiet -p build/tidy "$f" || status=1; done
  exit $status
fi
