#!/usr/bin/env bash
# Configures and builds mnist-train into build/ (or $BUILD_DIR). Extra arguments go to CMake's
# configure step, e.g. scripts/build.sh -DMNIST_CUDA=OFF; those after --target name what to build
# (everything by default), e.g. scripts/build.sh -DMNIST_SANITIZE=thread --target unit_tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
# The CUDA toolkit's usual home, when nvcc is not on PATH already.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
configure=()
targets=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--target" ]; then
    shift
    targets=(--target "$@")
    break
  fi
  configure+=("$1")
  shift
done
set -- "${configure[@]+"${configure[@]}"}"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [ $# -gt 0 ]; then
  cmake "$build" "$@"
fi
cmake --build "$build" --parallel "$(nproc)" "${targets[@]+"${targets[@]}"}"
