#!/usr/bin/env bash
# Two processes under mpirun (one CPU worker each) must train exactly like one process with two CPU
# workers on the same global batch: same seed, same sampler, dropout keyed by global sample index,
# batch norm synchronised over the global batch, so only the order of float additions may differ.
# Also checks that a rank that fails ends the whole job instead of leaving the other one hanging,
# and that ranks with different worker counts, settings or data are refused.
#
#   tests/mpi/mpirun_matches_threads.sh MNIST_TRAIN SOURCE_DIR [MPIEXEC]
#
# Exits 77 (skipped) only when there is no mpirun. Needs data/mnist (scripts/fetch_data.sh mnist).
# Tolerance for every loss and accuracy in metrics.jsonl and summary.json:
#   |mpi - threads| <= 1e-6 + 1e-5 * |threads|
set -euo pipefail

bin="${1:?usage: $0 MNIST_TRAIN SOURCE_DIR [MPIEXEC]}"
src="${2:?usage: $0 MNIST_TRAIN SOURCE_DIR [MPIEXEC]}"
mpiexec="${3:-}"
[[ -n "$mpiexec" && -x "$mpiexec" ]] || mpiexec="$(command -v mpirun || true)"
if [[ -z "$mpiexec" ]]; then
  echo "SKIP: no mpirun on PATH (Debian: openmpi-bin)"
  exit 77
fi
if [[ ! -f "$src/data/mnist/PROVENANCE" && ! -f "$src/data/mnist/train-images-idx3-ubyte" &&
      ! -f "$src/data/mnist/train-images-idx3-ubyte.gz" ]]; then
  echo "FAIL: $src/data/mnist has no MNIST files; run scripts/fetch_data.sh mnist first" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$src"

# OpenMPI refuses to run as root without both the flag and these variables (containers, CI).
mpirun=("$mpiexec" -np 2 --oversubscribe --bind-to none)
if [[ "$(id -u)" == 0 ]]; then
  mpirun+=(--allow-run-as-root)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Containers often forbid the cross-process memory copy (CMA) OpenMPI's shared-memory transport
# tries first; plain copies through shared memory work everywhere.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Ranks waiting in a collective yield the core instead of spinning: with more ranks than free cores
# (CI, a shared build box) spinning halves the speed of the rank being waited for.
export OMPI_MCA_mpi_yield_when_idle=1

# 2 replicas x 48 = global batch 96; 100 steps (enough to leave chance accuracy), evaluation at
# step 50 and at the end.
common=(--config configs/cpu_quickstart.yaml
        --set train.steps=100 --set train.batch_per_device=48 --set train.batch_norm=sync
        --set train.log_every=10 --set train.eval_every=50 --set train.eval_batch=500)

now() { date +%s.%N; }

t0=$(now)
"$bin" "${common[@]}" --log-level warn --set devices.cpu_workers=2 --set devices.threads=2 \
  --set output.dir="$work/threads" > "$work/threads.log" 2>&1 || {
  cat "$work/threads.log" >&2; echo "FAIL: the one-process run failed" >&2; exit 1; }
t1=$(now)
timeout 300 "${mpirun[@]}" "$bin" "${common[@]}" --log-level info --set devices.cpu_workers=1 \
  --set devices.threads=1 --set output.dir="$work/mpi" > "$work/mpi.log" 2>&1 || {
  cat "$work/mpi.log" >&2; echo "FAIL: the mpirun run failed" >&2; exit 1; }
t2=$(now)
awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN {
  printf "time: 1 process x 2 workers %.2f s; mpirun 2 processes x 1 worker %.2f s\n", b - a, c - b }'

status=0
fail() { echo "FAIL: $*" >&2; status=1; }

# Rank 0 prints every rank's line of the rank/host/device map; rank 1 logs no progress.
grep -q "rank 0/2 host" "$work/mpi.log" || fail "mpi.log lacks rank 0's line of the rank map"
grep -q "rank 1/2 host" "$work/mpi.log" || fail "mpi.log lacks rank 1's line of the rank map"
if grep -q "rank 1 (.*) info" "$work/mpi.log"; then fail "rank 1 logged progress (only rank 0 should)"; fi

# Every train and eval record, in order: "type step loss accuracy".
records() {
  awk '{
    type = $0; sub(/.*"type":"/, "", type); sub(/".*/, "", type)
    step = $0; sub(/.*"step":/, "", step); sub(/[,}].*/, "", step)
    loss = $0; sub(/.*"loss":/, "", loss); sub(/[,}].*/, "", loss)
    acc = $0; sub(/.*"accuracy":/, "", acc); sub(/[,}].*/, "", acc)
    print type, step, loss, acc
  }' "$1"
}
records "$work/threads/metrics.jsonl" > "$work/threads.records"
records "$work/mpi/metrics.jsonl" > "$work/mpi.records"
# 10 logged steps + 2 evaluations; with both ranks writing there would be twice as many.
[[ $(wc -l < "$work/threads.records") == 12 ]] || fail "threads metrics.jsonl: expected 12 records"
[[ $(wc -l < "$work/mpi.records") == 12 ]] || fail "mpi metrics.jsonl: expected 12 records (rank 0 alone writes)"

summary() {
  local f="$1/summary.json" key
  for key in steps global_batch test_samples test_loss test_accuracy final_train_loss; do
    printf '%s ' "$(sed -e "s/.*\"$key\":\([^,}]*\).*/\1/" "$f")"
  done
  echo
}
{ echo "summary $(summary "$work/threads")"; } >> "$work/threads.records"
{ echo "summary $(summary "$work/mpi")"; } >> "$work/mpi.records"

paste -d' ' "$work/threads.records" "$work/mpi.records" | awk '
  function close_enough(x, y) { d = x - y; if (d < 0) d = -d; a = y < 0 ? -y : y; return d <= 1e-6 + 1e-5 * a }
  {
    half = NF / 2
    for (i = 1; i <= half; ++i) {
      x = $(i + half); y = $i
      if (x == y) continue
      if (x ~ /^-?[0-9.eE+-]+$/ && y ~ /^-?[0-9.eE+-]+$/ && i > 2 && close_enough(x, y)) {
        d = x - y; if (d < 0) d = -d; if (d > worst) worst = d
        continue
      }
      printf "FAIL: record %d (%s step %s) field %d: threads %s, mpi %s\n", NR, $1, $2, i, y, x
      bad = 1
    }
  }
  END {
    printf "compared %d records; largest difference %g (tolerance 1e-6 + 1e-5 |value|)\n", NR, worst + 0
    exit bad
  }' || status=1
echo "threads: $(tail -n 1 "$work/threads.records")"
echo "mpi:     $(tail -n 1 "$work/mpi.records")"

# A rank that fails (rank 1's data directory does not exist) must end the job promptly with its
# error, not leave rank 0 waiting in the first collective.
set +e
timeout 120 "$mpiexec" --oversubscribe --bind-to none $([[ "$(id -u)" == 0 ]] && echo --allow-run-as-root) \
  -np 1 "$bin" "${common[@]}" --set devices.cpu_workers=1 --set output.dir="$work/fail" : \
  -np 1 "$bin" "${common[@]}" --set devices.cpu_workers=1 --set output.dir="$work/fail" \
  --set data.dir="$work/no-such-dir" > "$work/fail.log" 2>&1
code=$?
set -e
if [[ $code == 124 ]]; then
  fail "a failing rank left the job hanging (killed after 120 s)"
elif [[ $code == 0 ]]; then
  fail "the job succeeded although rank 1's data directory does not exist"
fi
grep -q "rank 1 (.*): data error: .*no-such-dir" "$work/fail.log" ||
  fail "rank 1's data error, prefixed with its rank and host, is not in the output"

# Ranks with different worker counts would split the batch wrongly: refused on every rank.
set +e
timeout 120 "$mpiexec" --oversubscribe --bind-to none $([[ "$(id -u)" == 0 ]] && echo --allow-run-as-root) \
  -np 1 "$bin" "${common[@]}" --set devices.cpu_workers=1 --set output.dir="$work/uneven" : \
  -np 1 "$bin" "${common[@]}" --set devices.cpu_workers=2 --set output.dir="$work/uneven" \
  > "$work/uneven.log" 2>&1
code=$?
set -e
[[ $code != 0 && $code != 124 ]] || fail "ranks with 1 and 2 workers: exit $code, expected a prompt failure"
grep -q "rank 0 runs 1 local workers but rank 1 runs 2" "$work/uneven.log" ||
  fail "the worker-count mismatch is not explained"

# A rank with other settings or other data would train a different model: refused on every rank.
set +e
timeout 120 "$mpiexec" --oversubscribe --bind-to none $([[ "$(id -u)" == 0 ]] && echo --allow-run-as-root) \
  -np 1 "$bin" "${common[@]}" --set devices.cpu_workers=1 --set output.dir="$work/other" : \
  -np 1 "$bin" "${common[@]}" --set devices.cpu_workers=1 --set output.dir="$work/other" \
  --set optimizer.lr=0.002 > "$work/config.log" 2>&1
code=$?
set -e
[[ $code == 2 ]] || fail "ranks with different optimizer.lr: exit $code, expected 2 (config error)"
grep -q "rank 1 (.*) resolved a different experiment than rank 0" "$work/config.log" ||
  fail "the differing experiment is not explained"

other="$work/other-data"
mkdir -p "$other"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [[ -f data/mnist/$f ]]; then cp "data/mnist/$f" "$other/$f"; else gzip -dc "data/mnist/$f.gz" > "$other/$f"; fi
done
# One pixel of the last training image changed, as by a copy that went wrong.
last=$(($(stat -c %s "$other/train-images-idx3-ubyte") - 1))
byte=$(od -An -tu1 -j "$last" -N1 "$other/train-images-idx3-ubyte" | tr -d ' ')
printf "\\$(printf '%03o' $(( byte == 0 ? 1 : 0 )))" |
  dd of="$other/train-images-idx3-ubyte" bs=1 seek="$last" conv=notrunc status=none
cmp -s "$other/train-images-idx3-ubyte" <(cat data/mnist/train-images-idx3-ubyte 2>/dev/null ||
  gzip -dc data/mnist/train-images-idx3-ubyte.gz) && fail "the altered copy of the data is unchanged"
set +e
timeout 120 "$mpiexec" --oversubscribe --bind-to none $([[ "$(id -u)" == 0 ]] && echo --allow-run-as-root) \
  -np 1 "$bin" "${common[@]}" --set devices.cpu_workers=1 --set output.dir="$work/other" : \
  -np 1 "$bin" "${common[@]}" --set devices.cpu_workers=1 --set output.dir="$work/other" \
  --set data.dir="$other" > "$work/data.log" 2>&1
code=$?
set -e
[[ $code == 2 ]] || fail "ranks with different data: exit $code, expected 2 (data error)"
grep -q "rank 1 (.*) loaded different data than rank 0" "$work/data.log" ||
  fail "the differing data is not explained"

if [[ $status != 0 ]]; then
  for f in mpi fail uneven config data; do echo "---- $f.log" >&2; cat "$work/$f.log" >&2; done
  exit 1
fi
echo "PASS"
