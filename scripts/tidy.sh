#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy: bugprone-*, concurrency-*, warnings as errors) over the project's
# C++ sources, using the compile commands of a configure-only build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build/tidy -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DIPCRING_PYTHON=OFF \
  -DIPCRING_WITH_CUDA=OFF >/dev/null
# The tracked sources; in a tree without git (an exported archive) the same files found on disk.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list_sources() { git ls-files 'src/*.cpp' 'tools/*.cpp' 'bench/*.cpp' 'tests/*.cpp'; }
else
  list_sources() { find src tools bench tests -name '*.cpp' -not -path '*/build/*' | sort; }
fi
mapfile -t files < <(list_sources \
  | grep -v -e '^tests/fuzz/' -e '^tests/gpu/' -e '_cudart\.cpp$' -e '^python/')
[[ ${#files[@]} -gt 0 ]] || { echo "tidy.sh: no sources found" >&2; exit 1; }
runner=$(command -v run-clang-tidy-14 || command -v run-clang-tidy || true)
if [[ -n "$runner" ]]; then
  "$runner" -quiet -p build/tidy -j "$(nproc)" "${files[@]}"
else
  status=0
  for f in "${files[@]}"; do clang-tidy --quiet -p build/tidy "$f" || status=1; done
  exit $status
fi
