#!/usr/bin/env bash
# The seed network's training step on the CPU, mnist-train beside PyTorch, measured in one run:
# the two alternate ROUNDS times (default 3), so a change in the machine's load hits both, and the
# ratio of each round and of the medians is printed.
#
#   scripts/bench_cpu_vs_pytorch.sh [--rounds 3] [--batch 1024] [--steps 20] [--threads N]
#                                   [--engine native]
#
# PyTorch is Debian's python3-torch, installed here with apt-get when `import torch` fails (it is
# not a dependency of mnist-train). Both sides use the same threads (default: every core), the
# same batch and random images; PyTorch runs scripts/bench_pytorch.py (eager, oneDNN convolutions).
#
# PyTorch runs two or three times a round: tuned, with MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=-1
# (glibc keeps freed memory instead of returning it to the kernel, as PyTorch's CPU performance
# guide advises; at this batch the default allocator spends much of a step in page faults), with
# jemalloc preloaded when Debian's libjemalloc2 is installed, with the guide's MALLOC_CONF (its
# other advice), and
# untuned, with glibc's defaults. The ratios are against the faster tuned figure of each round;
# the untuned one is printed beside it.
# mnist-train allocates its buffers once, so the setting does not change its figure.
# Environment: MNIST_TRAIN (default <repo>/build/bin/mnist-train); PYTHON (default /usr/bin/python3,
# the interpreter Debian's package installs into, when present).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mnist_train="${MNIST_TRAIN:-$repo/build/bin/mnist-train}"
python="${PYTHON:-python3}"
[[ -n "${PYTHON:-}" || ! -x /usr/bin/python3 ]] || python=/usr/bin/python3
rounds=3 batch=1024 steps=20 threads="$(nproc)" engine=native
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --engine) engine="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed -e '/^$/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_cpu_vs_pytorch: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x "$mnist_train" ]] || { echo "bench_cpu_vs_pytorch: $mnist_train not built (scripts/build.sh)" >&2; exit 1; }

# ---- set-up: PyTorch from Debian ------------------------------------------------------------------
if ! "$python" -c "import torch" >/dev/null 2>&1; then
  echo "set-up: installing Debian's python3-torch"
  sudo=""
  [[ "$(id -u)" -eq 0 ]] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q python3-torch >/dev/null
fi

export OMP_NUM_THREADS="$threads"
# One PyTorch measurement, its line of output, under the environment command "$@" (env ...).
pytorch_step() {
  "$@" "$python" - "$repo/scripts/bench_pytorch.py" "$threads" "$batch" "$steps" <<'PY'
import runpy, sys
import torch
script, threads, batch, steps = sys.argv[1:]
torch.set_num_threads(int(threads))
sys.argv = [script, "--device", "cpu", "--batch", batch, "--steps", steps]
runpy.run_path(script, run_name="__main__")
PY
}
jemalloc=""
# The guide's jemalloc settings: freed pages kept (decay effectively off), large blocks apart.
jemalloc_conf="oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:9000000000,muzzy_decay_ms:9000000000"
for candidate in /usr/lib/*-linux-gnu/libjemalloc.so.2; do
  [[ -e $candidate ]] && jemalloc="$candidate"
done
ours=() theirs=() untuned_all=()
for ((r = 1; r <= rounds; r++)); do
  line="$("$mnist_train" --log-level warn --config "$repo/configs/seed_single_gpu.yaml" \
    --set devices.backend=cpu --set devices.threads="$threads" --set devices.engine="$engine" \
    bench --batch "$batch" --steps "$steps" | grep -m1 'samples/s')"
  a="$(sed -E 's/.* ([0-9]+) samples\/s.*/\1/' <<<"$line")"
  tuned="$(pytorch_step env MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=-1)"
  untuned="$(pytorch_step env -u MALLOC_MMAP_MAX_ -u MALLOC_TRIM_THRESHOLD_)"
  b="$(sed -E 's/.* ([0-9]+) samples\/s.*/\1/' <<<"$tuned")"
  if [[ -n $jemalloc ]]; then
    with_jemalloc="$(pytorch_step env -u MALLOC_MMAP_MAX_ -u MALLOC_TRIM_THRESHOLD_ LD_PRELOAD="$jemalloc" MALLOC_CONF="$jemalloc_conf")"
    j="$(sed -E 's/.* ([0-9]+) samples\/s.*/\1/' <<<"$with_jemalloc")"
    tuned="$tuned; with jemalloc: $j samples/s"
    ((j > b)) && b="$j"
  fi
  c="$(sed -E 's/.* ([0-9]+) samples\/s.*/\1/' <<<"$untuned")"
  ours+=("$a") theirs+=("$b") untuned_all+=("$c")
  echo "round $r/$rounds: mnist-train ($engine, $threads threads) $a samples/s;" \
    "pytorch tuned: $tuned; pytorch untuned (glibc defaults): $untuned"
  awk -v a="$a" -v b="$b" -v c="$c" -v r="$r" \
    'BEGIN { printf "round %d ratio: %.2fx against tuned pytorch (%.2fx against untuned)\n", r, a / b, a / c }'
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ma="$(median "${ours[@]}")" mb="$(median "${theirs[@]}")" mc="$(median "${untuned_all[@]}")"
awk -v a="$ma" -v b="$mb" -v c="$mc" -v n="$rounds" 'BEGIN {
  printf "medians over %d rounds: mnist-train %d samples/s, pytorch tuned %d samples/s: %.2fx", n, a, b, a / b
  printf " (pytorch untuned %d samples/s: %.2fx)\n", c, a / c }'
echo "load average while measuring: $(cut -d' ' -f1-3 /proc/loadavg)"
