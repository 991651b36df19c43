#!/usr/bin/env bash
# Shows that the emulated GPU tests catch a missing __syncthreads in the project's kernels: deletes
# one barrier at a time (tiled GEMM and block reduction), rebuilds the emulated build, runs CTest's
# gpu_tests_emulated_* (one per CI schedule) and prints which failed, then restores the source.
# Not part of CTest (it edits and rebuilds the tree; about 10 minutes per barrier on 2 cores).
#
#   tests/emulation/missing_barrier_matrix.sh [BUILD_DIR]    (default build-emu, configured with
#                                                             -DMNIST_CUDA_EMULATION=ON)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build-emu}"
cd "$root"
barriers=(
  "lib/backend/cuda/tiled_gemm.cuh:after the tiles are staged"
  "lib/backend/cuda/tiled_gemm.cuh:before the tiles are overwritten"
  "lib/backend/cuda/launch.cuh:block_sum, after the warp sums are written"
  "lib/backend/cuda/launch.cuh:block_sum, before the buffer is reused"
)
backup="$(mktemp -d)"
restore() {
  for f in lib/backend/cuda/tiled_gemm.cuh lib/backend/cuda/launch.cuh; do
    cp "$backup/$(basename "$f")" "$f"
  done
  rm -rf "$backup"
}
cp lib/backend/cuda/tiled_gemm.cuh lib/backend/cuda/launch.cuh "$backup/"
trap restore EXIT
declare -A nth=()
for entry in "${barriers[@]}"; do
  file="${entry%%:*}" what="${entry#*:}"
  nth[$file]=$(( ${nth[$file]:-0} + 1 ))
  cp "$backup/$(basename "$file")" "$file"
  line=$(grep -n "__syncthreads();" "$file" | sed -n "${nth[$file]}p" | cut -d: -f1)
  sed -i "${line}s/__syncthreads();/\/\/ barrier removed/" "$file"
  echo "=== without the __syncthreads at $file:$line ($what)"
  cmake --build "$build" --parallel 2 > "$backup/build.log" 2>&1 || { cat "$backup/build.log"; exit 1; }
  (cd "$build" && ctest -j2 --output-on-failure -R 'gpu_tests_emulated_(forward|warps-reverse)$' \
     > "$backup/ctest.log" 2>&1) || true
  grep -E "Test +#.*gpu_tests_emulated|tests passed" "$backup/ctest.log" || true
  # The test cases that failed (Catch prints each after a line of dashes), and the first numbers.
  grep -A1 -E "^-{79}$" "$backup/ctest.log" | grep -vE "^-{79}$|^--$|^/" | sort | uniq -c |
    sed 's/^/  failed case (count over both schedules): /' || true
  grep -E "elements break" "$backup/ctest.log" | head -2 | cut -c1-160 | sed 's/^/  e.g. /' || true
  cp "$backup/$(basename "$file")" "$file"
done
cmake --build "$build" --parallel 2 > /dev/null
