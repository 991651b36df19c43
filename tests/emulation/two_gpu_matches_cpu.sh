#!/usr/bin/env bash
# The shipped two-GPU run, shortened, on the emulated CUDA build (two emulated GPUs, NCCL stand-in),
# and again with both workers on GPU 0 (devices.gpus: [0, 0], the device all-reduce), must follow
# the CPU backend's losses on the same config: same seed, samples and dropout masks, so only float
# summation order differs. Tolerance, the one the GPU tests' 50-step loss curve uses:
#   |gpu - cpu| <= 1e-3 + 1e-3 * |cpu|   for the loss of every step and the final evaluation.
#
#   tests/emulation/two_gpu_matches_cpu.sh MNIST_TRAIN SOURCE_DIR
#
# MNIST_TRAIN must come from a build with MNIST_CUDA_EMULATION=ON. Needs data/mnist
# (scripts/fetch_data.sh mnist).
set -euo pipefail

bin="${1:?usage: $0 MNIST_TRAIN SOURCE_DIR}"
src="${2:?usage: $0 MNIST_TRAIN SOURCE_DIR}"
if [[ ! -f "$src/data/mnist/PROVENANCE" && ! -f "$src/data/mnist/train-images-idx3-ubyte" &&
      ! -f "$src/data/mnist/train-images-idx3-ubyte.gz" ]]; then
  echo "FAIL: $src/data/mnist has no MNIST files; run scripts/fetch_data.sh mnist first" >&2
  exit 1
fi
"$bin" --version | grep -q "emulated" || {
  echo "FAIL: $bin is not an emulated CUDA build (mnist-train --version):" >&2
  "$bin" --version >&2
  exit 1
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$src"
export MNIST_CUDA_EMULATION_GPUS=2

common=(--config configs/two_gpu.yaml --set train.steps=5 --set train.batch_per_device=64
        --set train.log_every=1 --log-level warn)

run() {  # run NAME OVERRIDES...
  local name="$1"
  shift
  local t0
  t0=$(date +%s.%N)
  "$bin" "${common[@]}" "$@" --set output.dir="$work/$name" > "$work/$name.log" 2>&1 || {
    cat "$work/$name.log" >&2
    echo "FAIL: the $name run failed" >&2
    exit 1
  }
  awk -v a="$t0" -v b="$(date +%s.%N)" -v n="$name" 'BEGIN { printf "time: %s %.1f s\n", n, b - a }'
}

# Every train and eval record, in order: "type step loss".
records() {
  awk '{
    type = $0; sub(/.*"type":"/, "", type); sub(/".*/, "", type)
    step = $0; sub(/.*"step":/, "", step); sub(/[,}].*/, "", step)
    loss = $0; sub(/.*"loss":/, "", loss); sub(/[,}].*/, "", loss)
    if (type == "train" || type == "eval") print type, step, loss
  }' "$1"
}

run cpu --set devices.backend=cpu --set devices.cpu_workers=2
run two_gpus --set devices.backend=cuda
run one_gpu_twice --set devices.backend=cuda --set "devices.gpus=[0, 0]"

status=0
records "$work/cpu/metrics.jsonl" > "$work/cpu.records"
[[ $(grep -c '^train' "$work/cpu.records") == 5 ]] || {
  echo "FAIL: the CPU run's metrics.jsonl has no 5 train records:" >&2
  cat "$work/cpu.records" >&2
  exit 1
}
for name in two_gpus one_gpu_twice; do
  records "$work/$name/metrics.jsonl" > "$work/$name.records"
  if ! paste -d' ' "$work/cpu.records" "$work/$name.records" | awk -v n="$name" '
      { if ($1 != $4 || $2 != $5) { printf "FAIL: %s: record %d is %s %s, the CPU has %s %s\n", n, NR, $4, $5, $1, $2; bad = 1; next }
        d = $6 - $3; if (d < 0) d = -d; lim = 1e-3 + 1e-3 * ($3 < 0 ? -$3 : $3)
        printf "%s %s step %s: cpu %s gpu %s |diff| %.3g (limit %.3g)\n", n, $1, $2, $3, $6, d, lim
        if (!(d <= lim)) { print "FAIL: above the limit"; bad = 1 } }
      END { if (NR == 0) { print "FAIL: no records"; bad = 1 }; exit bad }'; then
    status=1
  fi
  [[ $(wc -l < "$work/$name.records") == $(wc -l < "$work/cpu.records") ]] || {
    echo "FAIL: $name has $(wc -l < "$work/$name.records") records, the CPU run $(wc -l < "$work/cpu.records")" >&2
    status=1
  }
done
exit $status
