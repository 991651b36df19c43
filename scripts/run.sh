#!/usr/bin/env bash
# One command from a fresh Debian machine to a trained model: install packages, build, fetch the data
# the config names, and train. Usage: scripts/run.sh [CONFIG] [mnist-train options...]
# Default: configs/seed_single_gpu.yaml, the seed's run on the official MNIST (60,000 train / 10,000
# test images; on the CPU when no GPU is visible).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
config="${1:-configs/seed_single_gpu.yaml}"
[ $# -gt 0 ] && shift
scripts/setup.sh --for run
# The tool alone; a build folder configured before (with the tests, say) keeps its settings.
if [ -f "${BUILD_DIR:-$root/build}/CMakeCache.txt" ]; then
  scripts/build.sh --target mnist-train
else
  scripts/build.sh -DMNIST_BUILD_TESTS=OFF --target mnist-train
fi
bin="${BUILD_DIR:-$root/build}/bin/mnist-train"
dataset="$(sed -n 's/^ *dataset: *\([A-Za-z-]*\).*/\1/p' "$config" | head -n 1)"
# An override wins over the file, as it does in mnist-train: the last --set data.dataset=X.
prev=""
for arg in "$@"; do
  [[ $prev == --set && $arg == data.dataset=* ]] && dataset="${arg#data.dataset=}"
  [[ $arg == --set=data.dataset=* ]] && dataset="${arg#--set=data.dataset=}"
  prev="$arg"
done
MNIST_TRAIN="$bin" scripts/fetch_data.sh "${dataset:-mnist}"
exec "$bin" --config "$config" "$@"
