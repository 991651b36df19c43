#!/usr/bin/env bash
# One command from a fresh Debian machine to a passing test suite: install packages, build (with the
# CUDA parts when the toolkit is present), fetch the MNIST files the accuracy tests use, run CTest.
# GPU tests are reported as skipped on machines without a GPU.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
scripts/build.sh
MNIST_TRAIN="${BUILD_DIR:-$root/build}/bin/mnist-train" scripts/fetch_data.sh mnist
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 1200 "$@"
