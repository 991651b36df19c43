#!/usr/bin/env bash
# One command for a machine with a GPU (H200, sm_90): build (or reuse a build), run the GPU tests,
# compute-sanitizer memcheck + racecheck on a fast subset, a short training run (plain and under
# memcheck), the two_gpu config on every GPU (NCCL) and on one shared GPU, and the benchmark,
# within a 6-minute budget. Full logs go to $OUT (when set) or <build>/gpu_check/; a summary of a
# few lines (PASS/FAIL/SKIP/TIMEOUT per stage and the key figures) is printed LAST.
#
# Usage: scripts/gpu_check.sh [BUILD_DIR]     (or BUILD_DIR=... scripts/gpu_check.sh)
#   A BUILD_DIR that already holds tests/gpu_tests is reused as is (the GPU machine may lack the
#   Debian packages CMake needs); otherwise the script configures and builds it (default: build/).
# Exit status: 0 when no stage failed (SKIP is not a failure), 1 otherwise.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
BUILD_DIR=${1:-${BUILD_DIR:-build}}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
LOG_DIR=${OUT:-$BUILD_DIR/gpu_check}
mkdir -p "$LOG_DIR"
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-350}  # stays under 6 minutes with margin for the summary
SUMMARY=()
FAILED=0

note() { echo "[gpu_check] $*"; }
remaining() { echo $((BUDGET - ($(date +%s) - START))); }
# stage_limit WANT: the smaller of WANT seconds and what is left of the budget (at least 1).
stage_limit() {
  local left
  left=$(remaining)
  if ((left < 1)); then left=1; fi
  if (($1 < left)); then echo "$1"; else echo "$left"; fi
}
record() {  # record NAME STATUS DETAIL
  SUMMARY+=("$(printf '%-18s %-7s %s' "$1" "$2" "$3")")
  if [[ $2 == FAIL || $2 == TIMEOUT ]]; then FAILED=1; fi
}
# run_stage NAME WANT_SECONDS LOG COMMAND...: runs with a timeout, sets STATUS (PASS/FAIL/TIMEOUT)
# and RC. Timeouts are failures: a check that did not finish did not pass.
run_stage() {
  local name=$1 want=$2 log=$3
  shift 3
  local limit
  limit=$(stage_limit "$want")
  note "$name (limit ${limit}s) -> $log"
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  RC=$?
  if ((RC == 124 || RC == 137)); then STATUS=TIMEOUT; elif ((RC == 0)); then STATUS=PASS; else STATUS=FAIL; fi
}

# ---- libraries from PyTorch's pip wheels (cuBLAS, cuDNN, NCCL under site-packages/nvidia/*/lib) ----
WHEEL_LIBS=""
for py in python3 python; do
  command -v "$py" >/dev/null 2>&1 || continue
  WHEEL_LIBS=$("$py" - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = list(sys.path)
try:
    roots += site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
seen = []
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib"))):
        if lib not in seen:
            seen.append(lib)
print(":".join(seen))
PY
)
  break
done
if [[ -n $WHEEL_LIBS ]]; then
  export LD_LIBRARY_PATH="$WHEEL_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  note "added pip-wheel CUDA libraries to LD_LIBRARY_PATH: $WHEEL_LIBS"
fi
# Keep FP32 math FP32 in every library we load (the tests compare against the CPU at FP32 tolerance).
export NVIDIA_TF32_OVERRIDE=0

# ---- environment ---------------------------------------------------------------------------------
{
  date -u
  uname -a
  command -v nvidia-smi >/dev/null && nvidia-smi
  command -v nvcc >/dev/null && nvcc --version
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}"
} >"$LOG_DIR/environment.log" 2>&1
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)

# ---- build ---------------------------------------------------------------------------------------
GPU_TESTS="$BUILD_DIR/tests/gpu_tests"
if [[ -x $GPU_TESTS ]]; then
  record build SKIP "reusing $BUILD_DIR (gpu_tests already built)"
else
  # cuDNN/NCCL from the wheels when the toolkit has none (the wheels ship versioned .so names only).
  EXTRA=()
  for part in cudnn nccl; do
    for root in ${WHEEL_LIBS//:/ }; do
      dir=$(dirname "$root")
      [[ $(basename "$dir") == "$part" && -d $dir/include ]] || continue
      lib=$(find "$dir/lib" -maxdepth 1 -name "lib$part.so*" | sort | head -n1)
      [[ -n $lib ]] || continue
      upper=$(echo "$part" | tr '[:lower:]' '[:upper:]')
      EXTRA+=("-D${upper}_INCLUDE_DIR=$dir/include" "-D${upper}_LIBRARY=$lib")
    done
  done
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  run_stage configure 90 "$LOG_DIR/configure.log" cmake -S "$ROOT" -B "$BUILD_DIR" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DMNIST_MPI=OFF "${EXTRA[@]}"
  if [[ $STATUS == PASS ]]; then
    TARGETS=(gpu_tests mnist-train)
    run_stage build 180 "$LOG_DIR/build.log" cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${TARGETS[@]}"
    record build "$STATUS" "$(grep -m1 -E 'error:|FAILED:' "$LOG_DIR/build.log" || echo "targets: ${TARGETS[*]}")"
  else
    record build FAIL "cmake configure failed; see $LOG_DIR/configure.log: $(grep -m1 -i error "$LOG_DIR/configure.log")"
  fi
fi

# ---- GPU tests -----------------------------------------------------------------------------------
if [[ -x $GPU_TESTS ]]; then
  missing=$(ldd "$GPU_TESTS" 2>/dev/null | grep "not found" | awk '{print $1}' | tr '\n' ' ')
  [[ -n $missing ]] && note "gpu_tests cannot find shared libraries: $missing"
  run_stage gpu_tests 180 "$LOG_DIR/gpu_tests.log" "$GPU_TESTS" --durations yes
  figure=$(grep -E "^(All tests passed|test cases:)" "$LOG_DIR/gpu_tests.log" | tail -n1)
  if ((RC == 77)); then
    STATUS=FAIL
    figure="exit 77: no GPU visible to gpu_tests: $(grep -m1 skipped "$LOG_DIR/gpu_tests.log")"
  fi
  [[ -n $missing ]] && figure="$figure; missing libs: $missing"
  record gpu_tests "$STATUS" "${figure:-see $LOG_DIR/gpu_tests.log (rc $RC)}"

  SANITIZER=$(command -v compute-sanitizer || true)
  if [[ -z $SANITIZER && -x /usr/local/cuda/bin/compute-sanitizer ]]; then SANITIZER=/usr/local/cuda/bin/compute-sanitizer; fi
  if [[ -z $SANITIZER ]]; then
    record memcheck SKIP "compute-sanitizer not found"
    record racecheck SKIP "compute-sanitizer not found"
  else
    # A fast subset: the GEMM tiles (dense), gather/scatter index math (pool), dropout, loss, optimizer.
    SUBSET='[dense],[max_pool],[dropout],[loss],[optimizer],[elementwise]'
    run_stage memcheck 75 "$LOG_DIR/memcheck.log" "$SANITIZER" --tool memcheck --error-exitcode 3 \
      "$GPU_TESTS" "$SUBSET"
    record memcheck "$STATUS" "$(grep -E 'ERROR SUMMARY' "$LOG_DIR/memcheck.log" | tail -n1) subset $SUBSET"
    # Shared-memory hazards live in the tiled GEMM and the block reductions.
    RACE_SUBSET='[dense],[batch_norm],[loss]'
    run_stage racecheck 60 "$LOG_DIR/racecheck.log" "$SANITIZER" --tool racecheck --error-exitcode 3 \
      "$GPU_TESTS" "$RACE_SUBSET"
    record racecheck "$STATUS" "$(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LOG_DIR/racecheck.log" | tail -n1) subset $RACE_SUBSET"
  fi
else
  record gpu_tests FAIL "$GPU_TESTS was not built"
fi

# ---- short training run --------------------------------------------------------------------------
TRAIN="$BUILD_DIR/bin/mnist-train"
CONFIG="$ROOT/configs/seed_single_gpu.yaml"
if [[ ! -x $TRAIN || ! -f $CONFIG ]]; then
  record train SKIP "needs $TRAIN and $CONFIG (not in this tree yet)"
  record train_memcheck SKIP "needs the training binary and config"
else
  # devices.backend=cuda: a machine whose GPU is unusable must fail here, not train on the CPU.
  run_stage train 45 "$LOG_DIR/train.log" "$TRAIN" --config "$CONFIG" --set train.steps=20 \
    --set devices.backend=cuda --set output.dir="$LOG_DIR/run_train"
  record train "$STATUS" "$(tail -n1 "$LOG_DIR/train.log")"
  if [[ -n ${SANITIZER:-} ]]; then
    run_stage train_memcheck 60 "$LOG_DIR/train_memcheck.log" "$SANITIZER" --tool memcheck \
      --error-exitcode 3 "$TRAIN" --config "$CONFIG" --set train.steps=20 \
      --set devices.backend=cuda --set output.dir="$LOG_DIR/run_memcheck"
    record train_memcheck "$STATUS" "$(grep -E 'ERROR SUMMARY' "$LOG_DIR/train_memcheck.log" | tail -n1)"
  else
    record train_memcheck SKIP "compute-sanitizer not found"
  fi
fi

# ---- NCCL and the shared GPU: the two_gpu config on every visible GPU, and two workers on GPU 0 ---
CONFIG2="$ROOT/configs/two_gpu.yaml"
if [[ ! -x $TRAIN || ! -f $CONFIG2 ]]; then
  record nccl_all_gpus SKIP "needs $TRAIN and $CONFIG2"
  record shared_gpu SKIP "needs $TRAIN and $CONFIG2"
else
  NGPU=$("$TRAIN" devices 2>/dev/null | grep -c '^gpu[0-9]')
  run_stage nccl_all_gpus 60 "$LOG_DIR/nccl_all_gpus.log" "$TRAIN" --config "$CONFIG2" \
    --set devices.backend=cuda --set devices.gpus=all --set train.steps=50 \
    --set output.dir="$LOG_DIR/run_all_gpus"
  detail="$NGPU GPU(s): $(tail -n1 "$LOG_DIR/nccl_all_gpus.log")"
  # With one GPU there is nothing to average between GPUs: say so instead of claiming NCCL ran.
  ((NGPU < 2)) && detail="only $NGPU GPU: NCCL between GPUs NOT exercised (gpu_tests check one rank); $detail"
  record nccl_all_gpus "$STATUS" "$detail"
  run_stage shared_gpu 60 "$LOG_DIR/shared_gpu.log" "$TRAIN" --config "$CONFIG2" \
    --set devices.backend=cuda --set 'devices.gpus=[0,0]' --set train.steps=50 \
    --set output.dir="$LOG_DIR/run_shared_gpu"
  record shared_gpu "$STATUS" "$(tail -n1 "$LOG_DIR/shared_gpu.log")"
fi

# ---- benchmark -----------------------------------------------------------------------------------
# Every CUDA engine at batch 1024 (samples/s and the per-layer split), then eager PyTorch on the
# same network and batch where PyTorch is installed, for the speed-up figure.
if [[ -x $TRAIN ]]; then
  run_stage bench 60 "$LOG_DIR/bench.log" "$TRAIN" --config "$ROOT/configs/seed_single_gpu.yaml" \
    --set devices.backend=cuda bench --batch 1024 --steps 50
  if [[ $STATUS == PASS ]]; then
    record bench "$STATUS" "$(grep -E '^engine' "$LOG_DIR/bench.log" | sed -E 's/, replica memory.*//' | tr '\n' ';')"
  else
    record bench "$STATUS" "$(tail -n1 "$LOG_DIR/bench.log")"
  fi
else
  record bench SKIP "$TRAIN not built"
fi
if [[ -x $TRAIN ]]; then
  # The per-step gradient all-reduce over every GPU present (NCCL with 2+, one rank otherwise).
  run_stage allreduce 60 "$LOG_DIR/allreduce.log" "$TRAIN" --config "$ROOT/configs/two_gpu.yaml" \
    --set devices.backend=cuda --set devices.gpus=all bench --allreduce --steps 1000
  record allreduce "$STATUS" "$(tail -n1 "$LOG_DIR/allreduce.log")"
fi
if python3 -c "import torch" 2>/dev/null; then
  run_stage bench_pytorch 60 "$LOG_DIR/bench_pytorch.log" python3 "$ROOT/scripts/bench_pytorch.py" --batch 1024 --steps 50
  record bench_pytorch "$STATUS" "$(tail -n 1 "$LOG_DIR/bench_pytorch.log")"
else
  record bench_pytorch SKIP "PyTorch not importable"
fi

# ---- summary (last) ------------------------------------------------------------------------------
ELAPSED=$(($(date +%s) - START))
{
  echo "==== gpu_check summary: ${GPU_NAME:-no nvidia-smi}; ${ELAPSED}s; logs in $LOG_DIR ===="
  printf '%s\n' "${SUMMARY[@]}"
  if ((FAILED)); then echo "RESULT: FAIL"; else echo "RESULT: PASS"; fi
} | tee "$LOG_DIR/summary.txt"
exit "$FAILED"
