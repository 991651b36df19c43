#!/usr/bin/env bash
# Builds the binaries the GPU check carries to a machine with a GPU (scripts/gpu_check.sh):
# mnist-train, gpu_tests and device_probes for sm_90 (H100/H200) into build-gpu/ (or
# $GPU_BUILD_DIR).
#   GPU_BUILD_SOURCE   the source tree to build, default this checkout (the GPU check's A/B
#                      baseline builds a commit extracted from git this way)
#   GPU_BUILD_TARGETS  the targets, default "mnist-train gpu_tests device_probes"
#
# That machine has the NVIDIA driver and PyTorch's pip copies of cuBLAS, cuDNN and NCCL, and none
# of the Debian packages this project builds against, so the binaries must need nothing else:
#   MPI off, CPU BLAS off (the static OpenBLAS alone is ~23 MB a binary), static cudart (the
#   project's CMake always links it so), static yaml-cpp, header-only spdlog/fmt/CLI11.
# scripts/check_needed.sh holds the list of shared libraries they may need; this script checks
# the binaries against it after building. Extra arguments go to CMake's configure step.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GPU_BUILD_DIR:-$root/build-gpu}"
source_dir="${GPU_BUILD_SOURCE:-$root}"
read -r -a targets <<<"${GPU_BUILD_TARGETS:-mnist-train gpu_tests device_probes}"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ] || [ $# -gt 0 ]; then
  cmake -S "$source_dir" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMNIST_CUDA=ON -DMNIST_CUDNN=ON -DMNIST_NCCL=ON \
    -DMNIST_MPI=OFF -DMNIST_BLAS=OFF "$@"
fi
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}"
binaries=()
for target in "${targets[@]}"; do
  case $target in
    mnist-train) binaries+=("$build/bin/mnist-train") ;;
    gpu_tests) binaries+=("$build/tests/gpu_tests") ;;
    device_probes) binaries+=("$build/tests/device_probes") ;;
  esac
done
# (A target list without either binary has nothing to check.)
((${#binaries[@]} == 0)) || "$root/scripts/check_needed.sh" "${binaries[@]}"
