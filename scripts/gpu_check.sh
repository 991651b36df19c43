#!/usr/bin/env bash
# The check of the GPU path on a machine with a GPU (an H200, sm_90) that has none of this
# project's build dependencies, in two halves:
#
#   scripts/gpu_check.sh prepare    here: build mnist-train and gpu_tests for sm_90 needing only the
#                                   shared libraries that machine has (scripts/build_gpu.sh,
#                                   scripts/check_needed.sh), and write the git-ignored folder
#                                   carry/: the binaries, copies of their C++/OpenMP/zlib runtimes,
#                                   the MNIST files as .gz and the CPU's losses for 20 steps of the
#                                   seed config. Prints the size; refuses (exit 2) when the working
#                                   tree plus carry/ exceed 60 MiB. With --baseline REV it also
#                                   builds REV's mnist-train the same way (build-gpu-baseline/, kept
#                                   for the next prepare) and packs it as carry/baseline/: the run
#                                   half then measures this build against it (A/B, below).
#   scripts/gpu_check.sh run        there: put PyTorch's site-packages nvidia/*/lib folders (cuBLAS,
#                                   cuDNN, NCCL) on LD_LIBRARY_PATH, check with ldd that the carried
#                                   binaries resolve every library (a runtime library missing there
#                                   or too old is taken from carry/lib; anything else stops the
#                                   check with one line, exit 2), then run the stages.
#   scripts/gpu_check.sh rehearse   here and in CI: a carry folder of its own from this machine's
#                                   build (build/, or $GPU_CHECK_REHEARSE_BUILD, e.g. an emulated
#                                   CUDA build), then the run half on it; without a GPU the GPU
#                                   stages run on the CPU and are reported SKIP unless they break.
#
# The device call that runs the check, after `scripts/gpu_check.sh prepare` here:
#   command:   bash scripts/gpu_check.sh run --out "$OUT"
#   carry:     ["carry"]
#   timeout_s: 420
# The stages share a budget of $GPU_CHECK_BUDGET_S seconds (330 by default), cheapest and most
# informative first: device query; gpu_tests; 20 steps of the seed config per engine (native,
# cublas, cudnn, fused) against the CPU's losses; the benchmark per engine (samples/s, cuDNN's
# chosen algorithms); with a baseline, the same benchmark of the baseline and this build in turn
# (samples/s and speed-up per engine); the fused step's per-kernel times (Nsight Compute), and the
# baseline's beside them kernel by kernel; where its kernels wait
# (ncu's stall samples per instruction, scripts/ncu_stalls.py); the gradient all-reduce
# (microseconds per call); two_gpu.yaml on every GPU (NCCL) and on one shared GPU; eager
# PyTorch on the same network; compute-sanitizer, probed first, then memcheck of the GPU tests and
# of a short training run, and racecheck. Each stage has a time limit: one that no longer fits in
# what is left of the budget is SKIP ("budget spent"), never FAIL, as is one whose input (data,
# PyTorch, a compute-sanitizer that accepts the device) is missing. A stage that times out FAILs,
# except a sanitizer stage that found nothing before its limit (SKIP, "incomplete"). 420 s leave
# room, with the machine's start, for a second run within 15 minutes of GPU time.
#
# Output, in the folder --out names (default $OUT, else build/gpu_check/<mode>): summary.json
# (PASS/FAIL/SKIP, seconds and figure per stage, and the figures by name: samples/s per engine,
# PyTorch samples/s, microseconds per all-reduce), summary.txt (the same as a table, also printed
# last) and logs.tar.gz (every stage's output). The summaries are rewritten after each stage, so
# a run cut short still leaves what it found.
# Exit status: 0 no stage failed, 1 a stage failed, 2 the check could not start.
#
# Options and environment:
#   prepare  [--binaries gpu|BUILD_DIR] [--carry DIR]   gpu (default) builds build-gpu/ first;
#            [--baseline REV|--baseline-build DIR]      a BUILD_DIR holding bin/mnist-train and
#            tests/gpu_tests is packed as it is; the A/B baseline: a commit (built) or a build
#            folder's bin/mnist-train (packed as it is); GPU_CHECK_BASELINE=REV is --baseline REV
#   run      [--carry DIR] [--out DIR]                  carry/ by default
#   rehearse [--fast] [--out DIR] [--reuse-carry]       --fast: fewer steps (CTest's case);
#            [--baseline-build DIR]                     --reuse-carry: the carry folder of an
#            earlier rehearsal, as it is; --baseline-build: an A/B baseline from DIR
#   GPU_CHECK_ONLY: a comma-separated list of stages to run (the others are SKIP), for a rerun;
#   GPU_CHECK_BUDGET_S (330), GPU_CHECK_LIMIT_MIB (60), GPU_CHECK_DATA_ROOT (data), GPU_BUILD_DIR
#   (build-gpu), GPU_CHECK_BASELINE_DIR (build-gpu-baseline), GPU_CHECK_REHEARSE_BUILD (build),
#   GPU_CHECK_REHEARSE_CARRY (build/gpu_check/rehearse-carry), GPU_CHECK_FAST (0; 1 is --fast).
set -u
if [[ -z ${EPOCHSECONDS:-} ]]; then
  echo "gpu_check: needs bash 5 or newer (this is bash $BASH_VERSION)" >&2
  exit 2
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$(pwd)

SEED_STEPS=20        # the seed run compared with the CPU, per engine
DATA_SETS=(mnist mnist-small)  # data/<name> folders packed when present; the first found trains
CARRY_LIMIT_MIB=${GPU_CHECK_LIMIT_MIB:-60}
BUDGET=${GPU_CHECK_BUDGET_S:-330}
FAST=${GPU_CHECK_FAST:-0}

say() { echo "gpu_check: $*"; }
die() {  # die MESSAGE: one line on stderr, exit 2
  echo "gpu_check: $*" >&2
  exit 2
}
abs_path() { case "$1" in /*) echo "$1" ;; *) echo "$ROOT/$1" ;; esac; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }

# =================================== prepare (this machine) ===================================

# Bytes that travel with a device call besides the carry folder: tracked and untracked files git
# does not ignore, and a shared/ folder inside the checkout.
tree_bytes() {
  local bytes
  bytes=$(git -C "$ROOT" ls-files -z -co --exclude-standard 2>/dev/null |
    (cd "$ROOT" && xargs -0 -r stat -c %s 2>/dev/null) | awk '{s += $1} END {print s + 0}')
  if [[ -d $ROOT/shared ]]; then bytes=$((bytes + $(du -sb "$ROOT/shared" | cut -f1))); fi
  echo "$bytes"
}

# pack_data DEST: data/<name>/ -> DEST/data/<name>/*.gz for every name in DATA_SETS present.
pack_data() {
  local dest=$1 data_root name file base packed=()
  data_root=$(abs_path "${GPU_CHECK_DATA_ROOT:-data}")
  for name in "${DATA_SETS[@]}"; do
    local src=$data_root/$name
    [[ -d $src ]] || continue
    local files=0
    for base in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
      t10k-labels-idx1-ubyte; do
      [[ -f $src/$base || -f $src/$base.gz ]] && files=$((files + 1))
    done
    if ((files < 4)); then
      say "skipping $src: it lacks some of the four IDX files"
      continue
    fi
    mkdir -p "$dest/data/$name" || return 1
    for base in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
      t10k-labels-idx1-ubyte; do
      file=$src/$base
      if [[ -f $file.gz ]]; then
        cp "$file.gz" "$dest/data/$name/" || return 1
      else
        gzip -6 -c "$file" >"$dest/data/$name/$base.gz" || return 1
      fi
    done
    [[ -f $src/PROVENANCE ]] && cp "$src/PROVENANCE" "$dest/data/$name/"
    packed+=("$name")
  done
  if ((${#packed[@]} == 0)); then
    say "no MNIST files under $data_root (${DATA_SETS[*]}): the training stages will be SKIP;" \
      "scripts/fetch_data.sh mnist fetches them"
  else
    say "packed data: ${packed[*]}"
  fi
}

# reference_run DEST: the seed config's first SEED_STEPS losses on the CPU, with the carried
# binary and data, as metrics.jsonl train records (the run half compares every engine with them).
reference_run() {
  local dest=$1 data tmp steps=$SEED_STEPS
  ((FAST)) && steps=5  # what the fast run half compares
  data=$(first_data_set "$dest") || return 0
  tmp=$(mktemp -d) || return 1
  if "$dest/bin/mnist-train" --config "$ROOT/configs/seed_single_gpu.yaml" \
    --set devices.backend=cpu --set "train.steps=$steps" --set train.log_every=1 \
    --set "data.dir=$dest/data/$data" --set "output.dir=$tmp/run" >"$tmp/log" 2>&1; then
    mkdir -p "$dest/reference"
    grep '"type":"train"' "$tmp/run/metrics.jsonl" >"$dest/reference/seed_cpu.jsonl"
    echo "$data" >"$dest/reference/data_set"
    say "CPU reference: $(wc -l <"$dest/reference/seed_cpu.jsonl") steps of the seed config on $data"
    rm -rf "$tmp"
  else
    say "the CPU reference run failed; last lines:"
    tail -n 5 "$tmp/log"
    rm -rf "$tmp"
    return 1
  fi
}

first_data_set() {  # first_data_set CARRY: prints the data set the training stages use
  local name
  for name in "${DATA_SETS[@]}"; do
    if [[ -f $1/data/$name/train-images-idx3-ubyte.gz ]]; then
      echo "$name"
      return 0
    fi
  done
  return 1
}

# The A/B baseline: a second mnist-train, built from another commit with the same flags, that the
# run half benchmarks and profiles beside the carried one (stages `baseline`, `baseline_kernels`),
# so that a speed change is measured against what it changes in one run on one machine.
# build_baseline REV: extracts REV (git archive) into build-gpu-baseline/<sha>/src, builds its
# mnist-train there with scripts/build_gpu.sh (the folder is kept: a second prepare against the
# same commit rebuilds nothing) and sets BASELINE_BUILD and BASELINE_LABEL.
BASELINE_BUILD=""
BASELINE_LABEL=""
build_baseline() {
  local rev=$1 sha dir
  sha=$(git -C "$ROOT" rev-parse --verify --quiet "$rev^{commit}") ||
    die "--baseline: '$rev' names no commit of this repository (git rev-parse)"
  dir=$(abs_path "${GPU_CHECK_BASELINE_DIR:-build-gpu-baseline}")/$sha
  if [[ ! -f $dir/src/.extracted ]]; then
    rm -rf "$dir/src"
    mkdir -p "$dir/src" || die "cannot create $dir/src"
    git -C "$ROOT" archive "$sha" | tar -x -C "$dir/src" || die "extracting $rev ($sha) failed"
    touch "$dir/src/.extracted"
  fi
  say "building the baseline $rev (${sha:0:7}) into $dir/build (scripts/build_gpu.sh)"
  GPU_BUILD_DIR=$dir/build GPU_BUILD_SOURCE=$dir/src GPU_BUILD_TARGETS=mnist-train \
    "$ROOT/scripts/build_gpu.sh" || die "the baseline's GPU build failed ($rev, $sha)"
  BASELINE_BUILD=$dir/build
  BASELINE_LABEL="${sha:0:7} ($rev)"
}

# prepare BINARIES CARRY KIND [BASELINE]: BINARIES is "gpu" (build build-gpu/ first) or a build
# folder; KIND is gpu (for the GPU machine: the binaries' libraries and the size limit are
# enforced) or rehearsal (a carry folder that stays on this machine: both are only reported);
# BASELINE, when given, is "rev:REV" (build_baseline) or "build:DIR" (DIR/bin/mnist-train as it
# is), packed as baseline/bin/mnist-train.
prepare() {
  local binaries=$1 carry=$2 kind=$3 baseline=${4:-} build
  case $baseline in
    "") ;;
    rev:*) build_baseline "${baseline#rev:}" ;;
    build:*)
      BASELINE_BUILD=$(abs_path "${baseline#build:}")
      BASELINE_LABEL="the build in ${BASELINE_BUILD#"$ROOT"/}"
      ;;
    *) die "prepare: unknown baseline '$baseline'" ;;
  esac
  if [[ -n $BASELINE_BUILD && ! -x $BASELINE_BUILD/bin/mnist-train ]]; then
    die "the baseline $BASELINE_BUILD/bin/mnist-train is not built"
  fi
  if [[ $binaries == gpu ]]; then
    build=$(abs_path "${GPU_BUILD_DIR:-build-gpu}")
    say "building the GPU binaries into $build (scripts/build_gpu.sh)"
    GPU_BUILD_DIR=$build "$ROOT/scripts/build_gpu.sh" || die "the GPU build failed"
  else
    build=$(abs_path "$binaries")
  fi
  [[ -x $build/bin/mnist-train ]] || die "$build/bin/mnist-train is not built"
  local tree_b staging
  tree_b=$(tree_bytes)  # before the staging folder exists (git would list its files)
  staging=$(mktemp -d "$(dirname "$carry")/.carry.XXXXXX") || die "cannot write beside $carry"
  trap 'rm -rf "$staging"' EXIT
  chmod 755 "$staging"  # mktemp makes it private
  mkdir -p "$staging/bin"
  cp "$build/bin/mnist-train" "$staging/bin/"
  local tool
  for tool in gpu_tests device_probes; do
    if [[ -x $build/tests/$tool ]]; then
      cp "$build/tests/$tool" "$staging/bin/"
    else
      say "$build/tests/$tool is not built (no CUDA, or device_probes in an emulated build): its stage will be SKIP"
    fi
  done
  if [[ -n $BASELINE_BUILD ]]; then
    mkdir -p "$staging/baseline/bin"
    cp "$BASELINE_BUILD/bin/mnist-train" "$staging/baseline/bin/"
  fi
  local needed_log=$staging/NEEDED
  if ! (cd "$staging" && "$ROOT/scripts/check_needed.sh" bin/* ${BASELINE_BUILD:+baseline/bin/*}) \
    >"$needed_log" 2>&1 &&
    [[ $kind == gpu ]]; then
    cat "$needed_log"
    die "the GPU binaries need libraries the GPU machine lacks (above); refusing to pack them"
  fi
  # The C++ and OpenMP runtimes and zlib as found here (about 3 MB): the run half uses a copy
  # only where that machine lacks the library or has one too old for the binaries.
  local lib path
  mkdir -p "$staging/lib"
  for lib in libstdc++.so.6 libgcc_s.so.1 libgomp.so.1 libz.so.1; do
    path=$(LC_ALL=C ldd "$staging/bin/mnist-train" | awk -v lib="$lib" '$1 == lib {print $3}')
    [[ -f $path ]] && cp -L "$path" "$staging/lib/$lib"
  done
  pack_data "$staging" || die "packing the data failed"
  reference_run "$staging" || die "the CPU reference run failed"
  {
    echo "kind=$kind"
    echo "built_in=${build#"$ROOT"/}"
    echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
      git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo "+uncommitted changes")"
    echo "prepared=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "version=$("$staging/bin/mnist-train" --version 2>/dev/null | tr -s ' \n' ' ')"
    if [[ -n $BASELINE_BUILD ]]; then
      echo "baseline=$BASELINE_LABEL"
      echo "baseline_version=$("$staging/baseline/bin/mnist-train" --version 2>/dev/null | tr -s ' \n' ' ')"
    fi
  } >"$staging/MANIFEST"

  local carry_b total_b limit_b
  carry_b=$(du -sb "$staging" | cut -f1)
  total_b=$((carry_b + tree_b))
  limit_b=$((CARRY_LIMIT_MIB * 1048576))
  say "carry $(mib "$carry_b") (binaries $(mib "$(du -sbc "$staging"/bin/* ${BASELINE_BUILD:+"$staging"/baseline/bin/*} | tail -n1 | cut -f1)")${BASELINE_BUILD:+ with the baseline}," \
    "runtime libraries $(mib "$(du -sb "$staging/lib" | cut -f1)")," \
    "data $(mib "$(du -sb "$staging/data" 2>/dev/null | cut -f1)")) + working tree" \
    "$(mib "$tree_b") = $(mib "$total_b") of the ${CARRY_LIMIT_MIB} MiB allowed"
  if ((total_b > limit_b)) && [[ $kind == rehearsal ]]; then
    say "(over the limit, which is fine here: a rehearsal's carry folder never travels)"
  elif ((total_b > limit_b)); then
    die "refused: the working tree and the carry folder come to $(mib "$total_b"), over" \
      "${CARRY_LIMIT_MIB} MiB (the device call sends at most 64 MiB); nothing was written to $carry"
  fi
  rm -rf "$carry"
  mv "$staging" "$carry" || die "cannot move the carry folder into $carry"
  trap - EXIT
  cat "$carry/NEEDED"
  say "wrote $carry ($kind binaries from ${build#"$ROOT"/}${BASELINE_BUILD:+; baseline: $BASELINE_LABEL})"
}

# ================================= run (the GPU machine) ======================================

MODE=run
CARRY=""
OUT_DIR=""
WORK=""
START=0
JSON_FIGURES=()  # "key": value pairs for the summary's figures object
FAILED=0
GPU_NAME=""
DEVICE=cuda      # the backend the GPU stages run on: cuda, or cpu when rehearsing without a GPU
GPUS=0
HAVE_CUDNN=0
ORIGINAL_LD_LIBRARY_PATH=""

# Bash builtins only below (no command substitution per stage): the summary is rewritten after
# every stage, and forks are slow on a loaded machine.
json_string() {  # json_string VAR TEXT: sets VAR to TEXT as a JSON string
  local s=$2
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/\\r}
  s=${s//$'\n'/\\n}
  s=${s//[[:cntrl:]]/}
  printf -v "$1" '"%s"' "$s"
}
elapsed() { ELAPSED=$((EPOCHSECONDS - START)); }
remaining() { REMAINING=$((BUDGET - (EPOCHSECONDS - START))); }

CARRY_JSON='""'
CARRY_LINE=""
STAGE_JSON=()  # one JSON object per recorded stage
TABLE=()       # one table row per recorded stage

write_summary() {
  local result=PASS i mode gpu
  ((FAILED)) && result=FAIL
  elapsed
  json_string mode "$MODE"
  json_string gpu "${GPU_NAME:-none}"
  local figures="" stages=""
  for i in "${!JSON_FIGURES[@]}"; do figures+="${figures:+,}${JSON_FIGURES[$i]}"; done
  for i in "${!STAGE_JSON[@]}"; do stages+="${stages:+,}${STAGE_JSON[$i]}"; done
  printf '{"check":"gpu_check","mode":%s,"result":"%s","gpu":%s,"elapsed_s":%d,"budget_s":%d,"carry":%s,"figures":{%s},"stages":[%s]}\n' \
    "$mode" "$result" "$gpu" "$ELAPSED" "$BUDGET" "$CARRY_JSON" "$figures" "$stages" \
    >"$OUT_DIR/summary.json"
  {
    printf '==== gpu_check %s: %s; %d s of a %d s budget; carry: %s====\n' "$MODE" \
      "${GPU_NAME:-no GPU}" "$ELAPSED" "$BUDGET" "$CARRY_LINE"
    printf '%-16s %-5s %5s  %s\n' stage status secs "figure / detail"
    printf '%s\n' "${TABLE[@]}"
    echo "RESULT: $result"
  } >"$OUT_DIR/summary.txt"
}
# Every stage's log, packed into $OUT_DIR at the end (and when the check is stopped).
pack_logs() {
  [[ -n $WORK && -d $WORK ]] || return 0
  tar -czf "$OUT_DIR/logs.tar.gz" --exclude=checkpoints -C "$WORK" . 2>/dev/null
}

# record NAME STATUS SECONDS LIMIT FIGURE DETAIL
record() {
  local name status figure detail text
  json_string name "$1"
  json_string figure "$5"
  json_string detail "$6"
  STAGE_JSON+=("{\"name\":$name,\"status\":\"$2\",\"seconds\":$3,\"limit_s\":$4,\"figure\":$figure,\"detail\":$detail}")
  text=$5
  [[ -n $6 ]] && text="${text:+$text; }$6"
  printf -v text '%-16s %-5s %5s  %s' "$1" "$2" "$3" "$text"
  TABLE+=("$text")
  [[ $2 == FAIL ]] && FAILED=1
  echo "gpu_check: $text"
  write_summary
}
figure() {  # figure KEY JSON_VALUE: one of the summary's named figures
  local key
  json_string key "$1"
  JSON_FIGURES+=("$key:$2")
}

# Stage bookkeeping: begin NAME WANT starts a stage if WANT seconds still fit in the budget
# (else records SKIP "budget spent" and returns 1); step LOG CMD... runs one command of the
# stage with what is left of the stage's limit; finish NAME STATUS FIGURE DETAIL records it.
STAGE_START=0
STAGE_END=0
STAGE_LIMIT=0
TIMED_OUT=0
begin() {
  remaining
  if ((REMAINING < $2)); then
    record "$1" SKIP 0 "$2" "" "budget spent: ${REMAINING} s left of ${BUDGET}, the stage needs up to $2"
    return 1
  fi
  STAGE_START=$EPOCHSECONDS
  STAGE_LIMIT=$2
  STAGE_END=$((STAGE_START + $2))
  TIMED_OUT=0
  say "$1 (up to $2 s)"
  return 0
}
step() {  # step LOG COMMAND...: sets RC
  local log=$1 left
  shift
  left=$((STAGE_END - EPOCHSECONDS))
  if ((left < 1)); then
    RC=124
    TIMED_OUT=1
    echo "gpu_check: not started: the stage's ${STAGE_LIMIT} s were spent" >>"$log"
    return
  fi
  echo "\$ $*" >>"$log"
  timeout --kill-after=5 "$left" "$@" >>"$log" 2>&1
  RC=$?
  if ((RC == 124 || RC == 137)); then
    TIMED_OUT=1
    echo "gpu_check: killed after ${left} s (the stage's limit is ${STAGE_LIMIT} s)" >>"$log"
    # compute-sanitizer runs its target outside timeout's reach: a racecheck stopped at its limit
    # left mnist-train running on the GPU, and every later measurement shared the GPU with it
    # (seen on an H200: the fused step 0.53 -> 1.19 ms). Stop whatever still runs the carried
    # binaries.
    if command -v pkill >/dev/null 2>&1 && pkill -KILL -f "$CARRY/(baseline/)?bin/" 2>/dev/null; then
      echo "gpu_check: stopped processes still running the carried binaries after the timeout" >>"$log"
    fi
  fi
}
# finish NAME STATUS FIGURE DETAIL. A timeout is a failure. When rehearsing on the CPU, a stage
# that ran on the stand-in device is reported SKIP (it says nothing about a GPU) unless it failed.
finish() {
  local status=$2 detail=$4
  if ((TIMED_OUT)); then
    status=FAIL
    detail="timed out after ${STAGE_LIMIT} s${detail:+; $detail}"
  fi
  if [[ $status == PASS && $DEVICE == cpu ]]; then
    status=SKIP
    detail="rehearsal: no GPU, ran on the CPU${detail:+; $detail}"
  fi
  record "$1" "$status" $((EPOCHSECONDS - STAGE_START)) "$STAGE_LIMIT" "$3" "$detail"
}
last_line() { grep -v '^\$ ' "$1" 2>/dev/null | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c1-300; }

# LD_LIBRARY_PATH from the pip packages PyTorch brings (nvidia/cublas/lib, nvidia/cudnn/lib, ...).
wheel_library_path() {
  local py
  for py in python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = list(sys.path)
try:
    roots += site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
seen = []
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib"))):
        if os.path.isdir(lib) and lib not in seen:
            seen.append(lib)
print(":".join(seen))
PY
    return
  done
}

# unresolved_libraries: "BINARY: LIBRARY (what)" for each library a carried binary needs and ldd
# cannot resolve: not found, or found without a symbol version the binary asks for.
unresolved_libraries() {
  local binary out label
  for binary in "$CARRY"/bin/* "$CARRY"/baseline/bin/*; do
    [[ -f $binary ]] || continue  # the glob of an absent folder
    out=$(LC_ALL=C ldd "$binary" 2>&1)
    {
      echo "== ldd $binary (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})"
      echo "$out"
    } >>"$WORK/environment.log"
    label=${binary#"$CARRY"/}
    awk -v bin="${label/bin\//}" '
      $2 == "=>" && $3 == "not" { print bin ": " $1 " (not found)" }
      /version `.*'"'"' not found/ { lib = $2; sub(/:$/, "", lib); n = split(lib, part, "/")
                                    print bin ": " part[n] " (" $4 " not found)" }' <<<"$out"
  done | sort -u
}

# ---- the stages --------------------------------------------------------------------------------

# stage NAME COMMAND...: runs one stage's function, unless GPU_CHECK_ONLY (a comma-separated list
# of stage names, for a rerun of a few) leaves it out. The memcheck and racecheck stages need
# sanitizer_probe selected too.
stage() {
  local name=$1
  shift
  if [[ -n ${GPU_CHECK_ONLY:-} && ",$GPU_CHECK_ONLY," != *",$name,"* ]]; then
    record "$name" SKIP 0 0 "" "not selected (GPU_CHECK_ONLY=$GPU_CHECK_ONLY)"
    return
  fi
  "$@"
}

# overrides for the backend the GPU stages run on
device_sets() {
  if [[ $DEVICE == cuda ]]; then
    echo "--set devices.backend=cuda"
  else
    echo "--set devices.backend=cpu"
  fi
}

stage_device_query() {
  begin device_query 20 || return
  local log=$WORK/device_query.log
  if command -v nvidia-smi >/dev/null 2>&1; then step "$log" nvidia-smi; fi
  step "$log" "$TRAIN" --version
  grep -q 'cuDNN:[[:space:]]*yes' "$log" && HAVE_CUDNN=1
  local cuda_built=0
  grep -q 'CUDA:[[:space:]]*yes' "$log" && cuda_built=1
  step "$log" "$TRAIN" devices
  GPUS=$(grep -cE '^gpu[0-9]+:' "$log")
  GPU_NAME=$(grep -m1 -E '^gpu0:' "$log" | sed -E 's/^gpu0: ([^(]*) \(.*/\1/')
  figure gpus "$GPUS"
  if ((GPUS > 0)); then
    DEVICE=cuda
    finish device_query PASS "$GPUS GPU(s): $(grep -E '^gpu[0-9]+:' "$log" | cut -d, -f1 | tr '\n' ';')" \
      "$(grep -m1 'CUDA driver' "$log")"
  elif [[ $MODE == rehearse ]]; then
    DEVICE=cpu
    # Not finish(): nothing ran on a stand-in device; this is simply no GPU.
    record device_query SKIP $((EPOCHSECONDS - STAGE_START)) 20 "" \
      "rehearsal, CUDA built: $cuda_built; $(last_line "$log")"
  else
    DEVICE=none
    record device_query FAIL $((EPOCHSECONDS - STAGE_START)) 20 "" \
      "no GPU visible: $(last_line "$log")"
  fi
}

# Every stage below needs a device: none after a failed device query.
no_device() {
  if [[ $DEVICE == none ]]; then
    record "$1" SKIP 0 0 "" "no GPU (device query failed)"
    return 0
  fi
  return 1
}

# carried STAGE BINARY WHY: BINARY is in the carry folder's bin/ (else STAGE is recorded SKIP,
# saying WHY it would be missing, and it returns 1)
carried() {
  [[ -x $CARRY/bin/$2 ]] && return 0
  record "$1" SKIP 0 0 "" "$2 is not in the carry folder ($3)"
  return 1
}

stage_gpu_tests() {
  no_device gpu_tests && return
  carried gpu_tests gpu_tests "a build without CUDA" || return
  begin gpu_tests 150 || return
  local log=$WORK/gpu_tests.log
  step "$log" "$CARRY/bin/gpu_tests" --durations yes
  local summary
  summary=$(grep -E '^(All tests passed|test cases:)' "$log" | tail -n 1)
  if ((RC == 77)); then
    if [[ $DEVICE == cpu ]]; then
      record gpu_tests SKIP $((EPOCHSECONDS - STAGE_START)) 150 "" \
        "no GPU: $(grep -m1 'skipped' "$log")"
    else
      finish gpu_tests FAIL "" "exit 77 although a GPU was listed: $(grep -m1 'skipped' "$log")"
    fi
  elif ((RC == 0)); then
    finish gpu_tests PASS "$summary" ""
  else
    finish gpu_tests FAIL "${summary:-exit $RC}" "$(grep -m1 -E 'FAILED|REQUIRE|error' "$log" | cut -c1-200)"
  fi
}

# The device micro-checks (tests/gpu_check/device_probes.cu): a kernel boundary in a captured
# graph with and without programmatic dependent launch, a cooperative grid.sync() with one and two
# resident blocks per SM. A few seconds; what the next designs of the fused step would pay.
stage_probes() {
  no_device probes && return
  carried probes device_probes "a build without real CUDA" || return
  begin probes 30 || return
  local log=$WORK/probes.log
  step "$log" "$CARRY/bin/device_probes"
  if ((RC == 77)); then
    TIMED_OUT=0
    record probes SKIP $((EPOCHSECONDS - STAGE_START)) 30 "" "no GPU: $(last_line "$log")"
    return
  fi
  local name value figures=()
  while read -r name value; do
    figure "probe_$name" "$value"
    figures+=("$name $value us")
  done < <(sed -n 's/^probe \([a-z0-9_]*\) \([0-9][0-9.]*\) us$/\1 \2/p' "$log")
  local joined status=PASS
  joined=$(printf '%s, ' "${figures[@]}")
  ((RC != 0 || ${#figures[@]} == 0)) && status=FAIL
  finish probes "$status" "${joined%, }" "$( ((RC != 0)) && last_line "$log")"
}

# The engines the GPU stages compare (the CPU backend has only native).
engines() {
  if [[ $DEVICE == cpu ]]; then
    echo native
  elif ((HAVE_CUDNN)); then
    echo native cublas cudnn fused
  else
    echo native cublas fused
  fi
}

# losses JSONL: the train records' losses, one per line
losses() { sed -n 's/.*"type":"train".*"loss":\([^,}]*\).*/\1/p' "$1"; }

stage_seed_vs_cpu() {
  no_device seed_vs_cpu && return
  local data
  if ! data=$(first_data_set "$CARRY"); then
    record seed_vs_cpu SKIP 0 0 "" "no MNIST data in the carry folder"
    return
  fi
  if [[ ! -s $CARRY/reference/seed_cpu.jsonl ]]; then
    record seed_vs_cpu SKIP 0 0 "" "no CPU reference in the carry folder (prepare writes it)"
    return
  fi
  begin seed_vs_cpu 75 || return
  local log=$WORK/seed_vs_cpu.log steps=$SEED_STEPS engine status=PASS figures=()
  ((FAST)) && steps=5
  losses "$CARRY/reference/seed_cpu.jsonl" | head -n "$steps" >"$WORK/seed_cpu.losses"
  for engine in $(engines); do
    local run=$WORK/seed_$engine
    # shellcheck disable=SC2046
    step "$log" "$TRAIN" --config "$ROOT/configs/seed_single_gpu.yaml" $(device_sets) \
      --set "devices.engine=$engine" --set "train.steps=$steps" --set train.log_every=1 \
      --set "data.dir=$CARRY/data/$data" --set "output.dir=$run"
    if ((RC != 0)); then
      status=FAIL
      figures+=("$engine: exit $RC: $(last_line "$log")")
      continue
    fi
    losses "$run/metrics.jsonl" >"$run/losses"
    # The GPU test's bound (tests/gpu/test_engine_gpu.cpp): |gpu - cpu| <= 1e-3 + 1e-3 |cpu|.
    # A loss that is not a finite number (NaN, inf, null) counts as a step out of bounds.
    local verdict ok n worst
    verdict=$(paste -d' ' "$WORK/seed_cpu.losses" "$run/losses" | awk -v want="$steps" '
      NF == 2 { n++
                if ($2 !~ /^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/) { bad++; next }
                d = $2 - $1; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1
                if (d > worst) worst = d; if (d > 1e-3 + 1e-3 * a) bad++ }
      END { printf "%s %d %.3g", (n == want && !bad) ? "ok" : "bad", n, worst }')
    read -r ok n worst <<<"$verdict"
    local verdict_text=""
    [[ $ok == ok ]] || verdict_text=" (out of bounds)"
    figures+=("$engine max|dloss| $worst over $n steps$verdict_text")
    figure "seed_max_abs_dloss_$engine" "$worst"
    [[ $ok == ok ]] || status=FAIL
  done
  local joined
  joined=$(printf '%s; ' "${figures[@]}")
  finish seed_vs_cpu "$status" "${joined%; }" "data $data, bound 1e-3 + 1e-3|cpu| per step"
}

# bench_rate LOG ENGINE: the last samples/s `mnist-train bench` printed for ENGINE in LOG
bench_rate() { sed -n "s/^engine $2, .* \([0-9][0-9.]*\) samples\/s.*/\1/p" "$1" | tail -n 1; }

# samples/s per engine from the bench stage, at BENCH_BATCH, for the pytorch stage's ratios
declare -A BENCH_RATE=()
BENCH_BATCH=0
# The batches the bench and pytorch stages measure, so the scaling is on record; the figures
# without a batch in their name (samples_per_s_ENGINE) are at BENCH_MAIN_BATCH.
BENCH_BATCHES=(256 1024 8192)
BENCH_MAIN_BATCH=1024
stage_bench() {
  no_device bench && return
  begin bench 90 || return
  local log=$WORK/bench.log batches=("${BENCH_BATCHES[@]}") main=$BENCH_MAIN_BATCH
  local args=(--steps 50)
  if ((FAST)); then
    batches=(256)
    main=256
    args=(--steps 3 --warmup 1)
  fi
  local list
  list=$(engines | tr ' ' ',')
  local figures=() engine rate missing=0 batch failed="" batch_log
  for batch in "${batches[@]}"; do
    batch_log=$WORK/bench_b$batch.log
    # shellcheck disable=SC2046
    step "$batch_log" "$TRAIN" --config "$ROOT/configs/seed_single_gpu.yaml" $(device_sets) \
      bench --batch "$batch" "${args[@]}" --engines "$list"
    cat "$batch_log" >>"$log"
    ((RC != 0)) && failed+="${failed:+; }batch $batch: exit $RC: $(last_line "$batch_log")"
    for engine in $(engines); do
      rate=$(bench_rate "$batch_log" "$engine")
      if [[ -z $rate ]]; then
        missing=1
        figures+=("$engine: no figure at batch $batch")
        continue
      fi
      figure "samples_per_s_${engine}_b$batch" "$rate"
      if ((batch == main)); then
        figure "samples_per_s_$engine" "$rate"
        BENCH_RATE[$engine]=$rate
        figures+=("$engine $rate samples/s")
      else
        figures+=("$engine $rate at batch $batch")
      fi
    done
  done
  BENCH_BATCH=$main
  local algorithms
  algorithms=$(sed -n 's/^ *algorithms //p' "$log" | sort -u | tr '\n' ';')
  local status=PASS joined
  [[ -n $failed || $missing == 1 ]] && status=FAIL
  joined=$(printf '%s, ' "${figures[@]}")
  finish bench "$status" "${joined%, }" \
    "batches ${batches[*]}, the unnamed figures at $main${algorithms:+; conv algorithms: ${algorithms%;}}${failed:+; $failed}"
}

# The two Nsight Compute stages' shared parts. find_ncu STAGE sets NCU, or records STAGE as SKIP
# (no GPU, or no ncu) and returns 1. FUSED_STEP: the command they profile, the fused engine's
# step launched eagerly (so that the profiler sees each kernel) at batch 1024, the batch the
# figures are per; 13 kernels a step (the graph's 12 and the batch gather, which the graph's step
# folds into conv1's kernel), and 120 launches cover the set-up and the first steps.
NCU=""
PROFILED_BATCH=1024
PROFILED_KERNELS_PER_STEP=13
PROFILED_SKIP=120
find_ncu() {
  NCU=$(command -v ncu 2>/dev/null || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  if [[ $DEVICE == cpu || -z $NCU ]]; then
    local why="no ncu (Nsight Compute) on this machine"
    [[ -n $NCU ]] && why="no GPU"
    record "$1" SKIP 0 0 "" "$why"
    return 1
  fi
}
fused_step() {  # fused_step BINARY: fills the array FUSED_STEP
  # shellcheck disable=SC2207
  FUSED_STEP=("$1" --config "$ROOT/configs/seed_single_gpu.yaml" $(device_sets)
    --set devices.engine=fused --set train.cuda_graph=false bench --batch "$PROFILED_BATCH"
    --steps 12 --warmup 2 --engines fused)
}

# Per-kernel GPU times of the fused engine's step (the step the bench times as a graph, launched
# eagerly here so that the profiler sees each kernel): Nsight Compute's gpu__time_duration of
# every kernel of KERNEL_STEPS steps after the set-up and warm-up ones, averaged per kernel name.
# The profiler runs each kernel alone with cold caches, so the sum is an upper bound of the
# replayed step's time. SKIP where ncu is missing or cannot read the device.
KERNEL_STEPS=3
# profile_fused_step BINARY NAME: profiles BINARY's step into $WORK/NAME.log (ncu's output and
# a table) and $WORK/NAME.tsv ("mean us<TAB>launches<TAB>kernel" per kernel, largest first); sets
# STEP_US (the kernels' sum per step) and CONV_US (the direct convolutions' share: direct_conv.cu's
# forward with the batch norm's statistics and backward with the block's gradient staged).
# Returns 1 (RC and the log say why) when ncu failed or printed no times.
STEP_US=0
CONV_US=0
KERNELS_STEP_US=0  # the kernels stage's figures, for the baseline_kernels stage
KERNELS_CONV_US=0
profile_fused_step() {
  local binary=$1 log=$WORK/$2.log csv=$WORK/$2.csv tsv=$WORK/$2.tsv
  fused_step "$binary"
  step "$log" "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-skip "$PROFILED_SKIP" --launch-count $((PROFILED_KERNELS_PER_STEP * KERNEL_STEPS)) \
    "${FUSED_STEP[@]}"
  grep -F '"gpu__time_duration.sum"' "$log" >"$csv"
  ((RC == 0)) && [[ -s $csv ]] || return 1
  # Fields are quoted and names hold commas: split on '","'. Field 5 the kernel, the last the ns.
  awk -F'","' -v steps="$KERNEL_STEPS" '
    { name = $5; sub(/^void /, "", name); gsub(/unnamed>::|\(anonymous namespace\)::/, "", name)
      sub(/\(.*/, "", name); v = $NF; gsub(/[",]/, "", v)
      sum[name] += v; n[name]++; all += v
      if (name ~ /^direct_conv2d_/) conv += v }
    END { for (k in sum) printf "%.1f\t%d\t%s\n", sum[k] / n[k] / 1000, n[k], k
          printf "%.1f\t0\tTOTAL\n", all / 1000 / steps
          printf "%.1f\t0\tCONV\n", conv / 1000 / steps }' "$csv" | sort -t$'\t' -k1,1 -g -r >"$tsv"
  STEP_US=$(awk -F'\t' '$3 == "TOTAL" { print $1 }' "$tsv")
  CONV_US=$(awk -F'\t' '$3 == "CONV" { print $1 }' "$tsv")
  sed -i '/\t0\t\(TOTAL\|CONV\)$/d' "$tsv"
  {
    echo "per launch, mean over $KERNEL_STEPS eager steps (batch $PROFILED_BATCH, fused engine, ncu); xN: launches"
    awk -F'\t' '{ printf "%s us x%s %s\n", $1, $2, $3 }' "$tsv"
  } >>"$log"
}
stage_kernels() {
  no_device kernels && return
  find_ncu kernels || return
  begin kernels 60 || return
  if ! profile_fused_step "$TRAIN" kernels; then
    finish kernels FAIL "" "ncu exit $RC: $(last_line "$WORK/kernels.log")"
    return
  fi
  local conv_rate
  conv_rate=$(awk -v us="$CONV_US" -v b="$PROFILED_BATCH" 'BEGIN { if (us > 0) printf "%.0f", b / us * 1e6; else print 0 }')
  echo "direct convolutions: $CONV_US us a step, $conv_rate samples/s" >>"$WORK/kernels.log"
  KERNELS_STEP_US=$STEP_US
  KERNELS_CONV_US=$CONV_US
  figure "fused_step_kernel_us" "$STEP_US"
  figure "fused_step_conv_us" "$CONV_US"
  figure "fused_step_conv_samples_per_s" "$conv_rate"
  finish kernels PASS "fused step: $STEP_US us of kernels at batch $PROFILED_BATCH, $CONV_US us of them convolutions ($conv_rate samples/s)" \
    "$(head -n 3 "$WORK/kernels.tsv" | awk -F'\t' '{ printf "%s%s us %s", (NR > 1 ? ";" : ""), $1, $3 }')"
}

# The A/B baseline (prepare --baseline REV packs one in carry/baseline/): the same benchmark as
# the bench stage, every engine of it (so the baseline must know them all), run with the baseline's
# binary and this one in turn (baseline, this, this, baseline: neither side always goes first),
# twice each (once with --fast); each side's best
# samples/s per engine and this build's over the baseline's. Alternating in one stage puts both
# under the same clocks and load, which two separate runs of the check would not. SKIP without a
# baseline in the carry folder.
BASELINE=""
no_baseline() {  # no_baseline STAGE: records STAGE as SKIP and returns 0 when none was packed
  [[ -n $BASELINE ]] && return 1
  record "$1" SKIP 0 0 "" "no baseline in the carry folder (prepare --baseline REV packs one)"
}
stage_baseline() {
  no_device baseline && return
  no_baseline baseline && return
  begin baseline 75 || return
  local log=$WORK/baseline.log args=(--batch 1024 --steps 50) pairs=2
  ((FAST)) && args=(--batch 256 --steps 3 --warmup 1) && pairs=1
  local list pair side sides binary engine rate status=PASS failure="" part=$WORK/baseline.part
  list=$(engines | tr ' ' ',')
  declare -A best=()
  for ((pair = 1; pair <= pairs; pair++)); do
    sides="baseline current"
    ((pair % 2 == 0)) && sides="current baseline"
    for side in $sides; do
      binary=$TRAIN
      [[ $side == baseline ]] && binary=$BASELINE
      echo "== $side, run $pair of $pairs" >>"$log"
      rm -f "$part"
      # shellcheck disable=SC2046
      step "$part" "$binary" --config "$ROOT/configs/seed_single_gpu.yaml" $(device_sets) \
        bench "${args[@]}" --engines "$list"
      cat "$part" >>"$log"
      if ((RC != 0)); then
        status=FAIL
        [[ -n $failure ]] || failure="; the $side's exit $RC: $(last_line "$part")"
        continue
      fi
      for engine in $(engines); do
        rate=$(bench_rate "$part" "$engine")
        [[ -n $rate ]] || continue
        if [[ -z ${best[$side/$engine]:-} ]] || awk -v a="$rate" -v b="${best[$side/$engine]}" 'BEGIN { exit !(a > b) }'; then
          best[$side/$engine]=$rate
        fi
      done
    done
  done
  local figures=() speedup
  for engine in $(engines); do
    if [[ -z ${best[baseline/$engine]:-} || -z ${best[current/$engine]:-} ]]; then
      status=FAIL
      figures+=("$engine: no figure")
      continue
    fi
    speedup=$(awk -v a="${best[current/$engine]}" -v b="${best[baseline/$engine]}" 'BEGIN { if (b > 0) printf "%.3f", a / b }')
    figure "baseline_samples_per_s_$engine" "${best[baseline/$engine]}"
    figure "ab_samples_per_s_$engine" "${best[current/$engine]}"
    [[ -n $speedup ]] && figure "speedup_vs_baseline_$engine" "$speedup"
    figures+=("$engine ${speedup:-?}x (${best[current/$engine]} vs ${best[baseline/$engine]} samples/s)")
  done
  local joined
  joined=$(printf '%s, ' "${figures[@]}")
  finish baseline "$status" "${joined%, }" \
    "this build over the baseline $(sed -n 's/^baseline=//p' "$CARRY/MANIFEST"), best of $pairs run(s) each in turn, batch ${args[1]}$failure"
}

# The baseline's fused step kernel by kernel, as the kernels stage profiles this build's, and
# both side by side in baseline_kernels.log (kernels matched by name). ncu times each kernel
# alone, so this comparison is steadier than the samples/s of the baseline stage. It assumes the
# baseline launches the same PROFILED_KERNELS_PER_STEP kernels a step (else the steps profiled
# are cut elsewhere, and the log's kernel list shows it).
stage_baseline_kernels() {
  no_device baseline_kernels && return
  no_baseline baseline_kernels && return
  find_ncu baseline_kernels || return
  begin baseline_kernels 60 || return
  local log=$WORK/baseline_kernels.log
  if ! profile_fused_step "$BASELINE" baseline_kernels; then
    finish baseline_kernels FAIL "" "ncu exit $RC: $(last_line "$log")"
    return
  fi
  figure "baseline_fused_step_kernel_us" "$STEP_US"
  figure "baseline_fused_step_conv_us" "$CONV_US"
  local text="the baseline's: $STEP_US us of kernels, $CONV_US us convolutions" detail=""
  if [[ -s $WORK/kernels.tsv ]]; then
    local speedup
    speedup=$(awk -v a="$KERNELS_STEP_US" -v b="$STEP_US" 'BEGIN { if (a > 0) printf "%.3f", b / a }')
    [[ -n $speedup ]] && figure "kernel_speedup_vs_baseline" "$speedup"
    text="this build's fused step $KERNELS_STEP_US us of kernels, the baseline's $STEP_US us (speed-up ${speedup:-?}x); convolutions $KERNELS_CONV_US against $CONV_US us"
    # Per kernel and step (the mean per launch times the launches a step: some kernels run twice
    # a step): this build's us, the baseline's, the difference; the largest change first.
    {
      echo "us per step: this build, the baseline, the difference, the kernel (0.0: not launched)"
      awk -F'\t' -v steps="$KERNEL_STEPS" '
        NR == FNR { base[$3] = $1 * $2 / steps; next }
        { t = $1 * $2 / steps; b = ($3 in base) ? base[$3] : 0; delete base[$3]
          printf "%.1f\t%.1f\t%+.1f\t%s\n", t, b, t - b, $3 }
        END { for (k in base) printf "0.0\t%.1f\t%+.1f\t%s\n", base[k], -base[k], k }' \
        "$WORK/baseline_kernels.tsv" "$WORK/kernels.tsv" |
        awk -F'\t' '{ d = $3 < 0 ? -$3 : $3; print d "\t" $0 }' | sort -t$'\t' -k1,1 -g -r | cut -f2-
    } >"$WORK/baseline_kernels.diff"
    cat "$WORK/baseline_kernels.diff" >>"$log"
    detail="largest changes a step: $(sed -n '2,4p' "$WORK/baseline_kernels.diff" |
      awk -F'\t' '{ printf "%s%s %s us", (NR > 1 ? "; " : ""), $4, $3 }')"
  fi
  finish baseline_kernels PASS "$text" "$detail"
}

# Where the fused step's kernels wait: Nsight Compute's full set (with its per-instruction stall
# samples) on one eager fused step at batch 1024, the report's SASS source page as CSV, and
# scripts/ncu_stalls.py's summary of it (stall reasons, instruction mix and hottest stretches per
# kernel) in stalls.log. The CSV goes back in logs.tar.gz (gzip'd, ~1 MB); the report (~25 MB) is
# not kept. SKIP where ncu is missing, as for `kernels`.
stage_stalls() {
  no_device stalls && return
  find_ncu stalls || return
  begin stalls 90 || return
  local log=$WORK/stalls.log csv=$WORK/stalls_source.csv report=$WORK/stalls_step
  fused_step "$TRAIN"
  step "$log" "$NCU" --clock-control none --set full --launch-skip "$PROFILED_SKIP" \
    --launch-count "$PROFILED_KERNELS_PER_STEP" -o "$report" "${FUSED_STEP[@]}"
  if ((RC != 0)) || [[ ! -s $report.ncu-rep ]]; then
    rm -f "$report.ncu-rep"
    finish stalls FAIL "" "ncu exit $RC: $(last_line "$log")"
    return
  fi
  # The page to the CSV, ncu's messages to the log; within the stage's limit, as every step.
  # shellcheck disable=SC2016
  step "$log" sh -c '"$0" -i "$1" --page source --print-source sass --csv >"$2"' "$NCU" \
    "$report.ncu-rep" "$csv"
  rm -f "$report.ncu-rep"
  if ((RC != 0)) || [[ ! -s $csv ]]; then
    finish stalls FAIL "" "ncu --page source exit $RC: $(last_line "$log")"
    return
  fi
  step "$log" python3 "$ROOT/scripts/ncu_stalls.py" "$csv"
  gzip -f "$csv"
  if ((RC != 0)); then
    finish stalls FAIL "" "ncu_stalls.py exit $RC: $(last_line "$log")"
    return
  fi
  # The detail: the step's largest kernel by samples and what it waits on.
  local top
  top=$(awk '/^== / && match($0, /: [0-9]+ samples/) {
               n = substr($0, RSTART + 2, RLENGTH - 10) + 0
               if (n > best) { best = n; line = $0 } }
             END { print line }' "$log")
  finish stalls PASS "" "largest: ${top#== }; $(grep -A1 -F "$top" "$log" | sed -n 2p | sed 's/^ *//')"
}

stage_allreduce() {
  no_device allreduce && return
  begin allreduce 30 || return
  local log=$WORK/allreduce.log steps=1000 status=PASS figures=()
  ((FAST)) && steps=100
  # every GPU (NCCL with two or more), and two workers sharing GPU 0 (the device reduction)
  local layouts=(all_gpus shared_gpu) layout sets us
  [[ $DEVICE == cpu ]] && layouts=(cpu_x2)
  for layout in "${layouts[@]}"; do
    case $layout in
      all_gpus) sets=(--set devices.backend=cuda --set devices.gpus=all) ;;
      shared_gpu) sets=(--set devices.backend=cuda --set "devices.gpus=[0,0]") ;;
      cpu_x2) sets=(--set devices.backend=cpu --set devices.cpu_workers=2) ;;
    esac
    step "$log" "$TRAIN" --config "$ROOT/configs/two_gpu.yaml" "${sets[@]}" bench --allreduce \
      --steps "$steps"
    us=$(grep 'all-reduce' "$log" | tail -n 1 | sed -n 's/.* \([0-9][0-9.]*\) us\/call.*/\1/p')
    if ((RC == 0)) && grep 'all-reduce' "$log" | tail -n 1 | grep -q 'nothing to reduce'; then
      # One GPU: "every GPU" is one worker, whose all-reduce is no call at all; not a failure.
      figures+=("$layout: one worker, nothing to reduce")
    elif ((RC != 0)) || [[ -z $us ]]; then
      status=FAIL
      figures+=("$layout: $(last_line "$log")")
    else
      figures+=("$layout $us us ($(grep 'all-reduce' "$log" | tail -n 1 |
        sed -E 's/^all-reduce \(([^)]*)\).*/\1/'))")
      figure "allreduce_us_$layout" "$us"
    fi
  done
  local joined
  joined=$(printf '%s; ' "${figures[@]}")
  finish allreduce "$status" "${joined%; }" "the seed network's gradient, $steps calls"
}

# train_stage NAME GPUS_OVERRIDE CPU_WORKERS: the two_gpu config for a few steps.
train_stage() {
  local name=$1 gpus=$2 workers=$3
  no_device "$name" && return
  local data
  if ! data=$(first_data_set "$CARRY"); then
    record "$name" SKIP 0 0 "" "no MNIST data in the carry folder"
    return
  fi
  begin "$name" 40 || return
  local log=$WORK/$name.log steps=50 sets
  ((FAST)) && steps=5
  if [[ $DEVICE == cpu ]]; then
    sets=(--set devices.backend=cpu --set "devices.cpu_workers=$workers")
  else
    sets=(--set devices.backend=cuda --set "devices.gpus=$gpus")
  fi
  step "$log" "$TRAIN" --config "$ROOT/configs/two_gpu.yaml" "${sets[@]}" \
    --set "train.steps=$steps" --set train.batch_per_device=256 --set "data.dir=$CARRY/data/$data" \
    --set "output.dir=$WORK/run_$name"
  local done_line detail=""
  done_line=$(grep -m1 'done:' "$log" | sed -E 's/.*(done: .*test accuracy [0-9.]+).*/\1/')
  if [[ $name == nccl_all_gpus && $DEVICE == cuda && $GPUS -lt 2 ]]; then
    detail="only $GPUS GPU: NCCL between GPUs NOT exercised"
  fi
  if ((RC == 0)) && [[ -n $done_line ]]; then
    finish "$name" PASS "$done_line" "$detail"
  else
    finish "$name" FAIL "exit $RC" "$(last_line "$log")"
  fi
}

# pytorch_rate LOG LABEL BATCH: the samples/s scripts/bench_pytorch.py printed for LABEL (eager,
# or "compiled (MODE)") at BATCH in LOG
pytorch_rate() {
  sed -n "s/^pytorch .* $2 on .*: batch $3, .* \([0-9][0-9.]*\) samples\/s.*/\1/p" "$1" | tail -n 1
}
# pytorch_ready STAGE LOG: PyTorch imports (else STAGE is recorded SKIP and it returns 1)
pytorch_ready() {
  # PyTorch finds its own libraries; the paths set for our binaries could only shadow them.
  step "$2" env LD_LIBRARY_PATH="$ORIGINAL_LD_LIBRARY_PATH" python3 -c \
    "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  ((RC == 0)) && return 0
  TIMED_OUT=0
  record "$1" SKIP $((EPOCHSECONDS - STAGE_START)) "$STAGE_LIMIT" "" "PyTorch not importable: $(last_line "$2")"
  return 1
}
# ratios_to RATE NAME: each engine's bench figure over RATE (PyTorch's at the bench's main batch)
# as the figure ratio_to_NAME_ENGINE; sets RATIOS to "engine Nx" words
RATIOS=()
ratios_to() {
  local engine ratio
  RATIOS=()
  for engine in $(engines); do
    [[ -n ${BENCH_RATE[$engine]:-} ]] || continue
    ratio=$(awk -v a="${BENCH_RATE[$engine]}" -v b="$1" 'BEGIN { if (b > 0) printf "%.2f", a / b }')
    [[ -n $ratio ]] || continue
    figure "ratio_to_$2_$engine" "$ratio"
    RATIOS+=("$engine ${ratio}x")
  done
}

# Eager PyTorch at the bench stage's batches; the ratios at its main batch.
stage_pytorch() {
  no_device pytorch && return
  begin pytorch 60 || return
  local log=$WORK/pytorch.log
  pytorch_ready pytorch "$log" || return
  local batches=("${BENCH_BATCHES[@]}") main=$BENCH_MAIN_BATCH args=(--steps 50)
  if ((FAST)); then
    batches=(256)
    main=256
    args=(--steps 3 --warmup 1)
  fi
  local joined_batches
  joined_batches=$(printf '%s,' "${batches[@]}")
  step "$log" env LD_LIBRARY_PATH="$ORIGINAL_LD_LIBRARY_PATH" python3 \
    "$ROOT/scripts/bench_pytorch.py" --batch "${joined_batches%,}" "${args[@]}" --device "$DEVICE" \
    --modes eager
  local rate batch others=()
  for batch in "${batches[@]}"; do
    rate=$(pytorch_rate "$log" eager "$batch")
    [[ -n $rate ]] || continue
    figure "pytorch_eager_samples_per_s_b$batch" "$rate"
    ((batch == main)) || others+=("$rate at batch $batch")
  done
  rate=$(pytorch_rate "$log" eager "$main")
  if ((RC == 0)) && [[ -n $rate ]]; then
    figure pytorch_samples_per_s "$rate"
    local text="$rate samples/s (eager, batch $main)" joined
    # Each engine's bench figure over PyTorch's, when the bench stage ran at the same batch.
    RATIOS=()
    [[ $BENCH_BATCH == "$main" ]] && ratios_to "$rate" pytorch
    if ((${#RATIOS[@]})); then
      joined=$(printf '%s, ' "${RATIOS[@]}")
      text+="; the engines against it: ${joined%, }"
    fi
    if ((${#others[@]})); then
      joined=$(printf '%s, ' "${others[@]}")
      text+="; eager ${joined%, }"
    fi
    finish pytorch PASS "$text" "$(grep -m1 '^pytorch' "$log" | cut -d: -f1)"
  else
    finish pytorch FAIL "exit $RC" "$(last_line "$log")"
  fi
}

# The same network under torch.compile, the form its users would pick for speed: max-autotune
# (Inductor's autotuned kernels with CUDA graphs) and reduce-overhead (CUDA graphs), at the bench
# stage's main batch, channels_last, TF32 off. Compiling takes most of the stage's time, so it is
# a stage of its own: the eager figures above never wait on it.
stage_pytorch_compiled() {
  no_device pytorch_compiled && return
  begin pytorch_compiled 240 || return
  local log=$WORK/pytorch_compiled.log
  pytorch_ready pytorch_compiled "$log" || return
  local main=$BENCH_MAIN_BATCH args=(--steps 50 --warmup 5)
  if ((FAST)); then
    main=256
    args=(--steps 3 --warmup 1)
  fi
  step "$log" env LD_LIBRARY_PATH="$ORIGINAL_LD_LIBRARY_PATH" python3 \
    "$ROOT/scripts/bench_pytorch.py" --batch "$main" "${args[@]}" --device "$DEVICE" \
    --modes max-autotune,reduce-overhead --channels-last auto
  local mode rate best="" best_mode="" figures=() skipped
  for mode in max-autotune reduce-overhead; do
    rate=$(pytorch_rate "$log" "compiled ($mode)" "$main")
    if [[ -n $rate ]]; then
      figure "pytorch_${mode//-/_}_samples_per_s" "$rate"
      figures+=("$mode $rate samples/s")
      if [[ -z $best ]] || awk -v a="$rate" -v b="$best" 'BEGIN { exit !(a > b) }'; then
        best=$rate
        best_mode=$mode
      fi
    fi
  done
  skipped=$(sed -n 's/^pytorch .* compiled (\(.*\)) on .*: skipped: \(.*\)/\1: \2/p' "$log" | head -n 1)
  if [[ -z $best ]]; then
    if [[ -n $skipped && $RC == 0 ]]; then
      TIMED_OUT=0
      record pytorch_compiled SKIP $((EPOCHSECONDS - STAGE_START)) "$STAGE_LIMIT" "" "$skipped"
    else
      finish pytorch_compiled FAIL "exit $RC, no figure" "$(last_line "$log")"
    fi
    return
  fi
  figure pytorch_compiled_samples_per_s "$best"
  local text joined
  joined=$(printf '%s, ' "${figures[@]}")
  text="${joined%, } (batch $main)"
  RATIOS=()
  [[ $BENCH_BATCH == "$main" ]] && ratios_to "$best" pytorch_compiled
  if ((${#RATIOS[@]})); then
    joined=$(printf '%s, ' "${RATIOS[@]}")
    text+="; the engines against the faster ($best_mode): ${joined%, }"
  fi
  local status=PASS
  ((RC != 0)) && status=FAIL
  finish pytorch_compiled "$status" "$text" "$( ((RC != 0)) && last_line "$log")${skipped:+ skipped $skipped}"
}

SANITIZER=""
stage_sanitizer() {
  no_device sanitizer_probe && return
  SANITIZER=$(command -v compute-sanitizer || true)
  [[ -z $SANITIZER && -x /usr/local/cuda/bin/compute-sanitizer ]] &&
    SANITIZER=/usr/local/cuda/bin/compute-sanitizer
  if [[ -z $SANITIZER ]]; then
    record sanitizer_probe SKIP 0 0 "" "compute-sanitizer not found"
    return
  fi
  if [[ ! -x $CARRY/bin/gpu_tests || $DEVICE != cuda ]]; then
    record sanitizer_probe SKIP 0 0 "" "needs a GPU and gpu_tests"
    return
  fi
  begin sanitizer_probe 30 || return
  local log=$WORK/sanitizer_probe.log
  # One small test that allocates: some runtimes refuse the device ("Device not supported") and
  # then fail every allocation, which would read as memory errors in our code.
  step "$log" "$SANITIZER" --tool memcheck --error-exitcode 3 "$CARRY/bin/gpu_tests" \
    "copies round-trip through device memory"
  if grep -qi 'not supported' "$log" || ((RC != 0)); then
    TIMED_OUT=0
    record sanitizer_probe SKIP $((EPOCHSECONDS - STAGE_START)) 30 "" \
      "compute-sanitizer cannot check this machine (exit $RC): $(grep -m1 -i -E 'not supported|error' "$log" | cut -c1-200)"
    SANITIZER=""
    return
  fi
  finish sanitizer_probe PASS "$(grep -m1 'ERROR SUMMARY' "$log")" ""
}

# sanitize NAME TOOL WANT SUMMARY_PATTERN WHAT COMMAND...: one compute-sanitizer stage
sanitize() {
  local name=$1 tool=$2 want=$3 mark=$4 what=$5
  shift 5
  if [[ -z $SANITIZER ]]; then
    record "$name" SKIP 0 0 "" "compute-sanitizer unavailable (see sanitizer_probe)"
    return
  fi
  begin "$name" "$want" || return
  local log=$WORK/$name.log
  step "$log" "$SANITIZER" --tool "$tool" --error-exitcode 3 "$@"
  local summary first_error
  summary=$(grep -E "$mark" "$log" | tail -n 1)
  # compute-sanitizer reports each error as it finds it, on lines starting "========= ".
  first_error=$(grep -m1 -E '^========= +(Invalid|Error|Race|Program hit|.*hazard)' "$log" | cut -c1-200)
  if ((RC == 0)); then
    finish "$name" PASS "$summary" "$what"
  elif ((TIMED_OUT)) && [[ -z $first_error ]]; then
    # Slower under the tool than planned: an unfinished check, not an error found in our code.
    record "$name" SKIP $((EPOCHSECONDS - STAGE_START)) "$want" "" \
      "incomplete: stopped at the stage's limit of $want s with no error reported so far"
  else
    finish "$name" FAIL "${summary:-exit $RC}" "${first_error:-$(last_line "$log")}"
  fi
}

stage_memcheck() {
  no_device memcheck && return
  # The kernels with index arithmetic worth checking, at the tests' awkward sizes (the conv tests
  # at n=1000 on three engines are slow under the tool; the training runs below cover the
  # convolutions and batch norm at the seed network's shapes).
  local subset='[dense],[max_pool],[dropout],[loss],[optimizer],[elementwise],[gather],[relu]'
  sanitize memcheck memcheck 60 'ERROR SUMMARY' "gpu_tests $subset" "$CARRY/bin/gpu_tests" "$subset"
}

# sanitize_training NAME TOOL WANT SUMMARY_PATTERN: two training steps of the seed config at
# batch 64 and its evaluation run every kernel of the seed network once, at its real shapes.
sanitize_training() {
  local name=$1 tool=$2 want=$3 mark=$4
  no_device "$name" && return
  local data
  if ! data=$(first_data_set "$CARRY"); then
    record "$name" SKIP 0 0 "" "no MNIST data in the carry folder"
    return
  fi
  sanitize "$name" "$tool" "$want" "$mark" \
    "2 training steps of the seed config at batch 64 and its evaluation" "$TRAIN" \
    --config "$ROOT/configs/seed_single_gpu.yaml" --set devices.backend=cuda --set train.steps=2 \
    --set train.batch_per_device=64 --set train.eval_batch=256 \
    --set "data.dir=$CARRY/data/$data" --set "output.dir=$WORK/run_$name"
}

run_half() {
  CARRY=$(abs_path "$1")
  OUT_DIR=$2
  [[ -d $CARRY ]] || die "no carry folder at $CARRY: run 'scripts/gpu_check.sh prepare' here" \
    "and name it in the device call's carry list"
  [[ -f $CARRY/MANIFEST ]] || die "$CARRY has no MANIFEST: it was not written by prepare"
  if [[ $MODE == run ]] && ! grep -qx 'kind=gpu' "$CARRY/MANIFEST"; then
    die "$CARRY holds $(grep '^kind=' "$CARRY/MANIFEST") binaries, not GPU ones: run" \
      "'scripts/gpu_check.sh prepare' (rehearse writes its own carry folder)"
  fi
  TRAIN=$CARRY/bin/mnist-train
  [[ -f $CARRY/baseline/bin/mnist-train ]] && BASELINE=$CARRY/baseline/bin/mnist-train
  # A copy of the tree that dropped the executable bits would otherwise fail every stage (126).
  chmod +x "$CARRY"/bin/* ${BASELINE:+"$BASELINE"} 2>/dev/null
  mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"
  WORK=$(mktemp -d) || die "cannot make a temporary folder"
  # The logs reach OUT_DIR however the run ends: done, stopped early, or stopped by a signal.
  trap 'pack_logs; rm -rf "$WORK"' EXIT
  trap 'exit 143' TERM INT
  START=$EPOCHSECONDS
  local manifest
  manifest=$(<"$CARRY/MANIFEST")
  json_string CARRY_JSON "${manifest//$'\n'/; }"
  CARRY_LINE=$(grep -E '^(kind|commit|baseline)=' "$CARRY/MANIFEST" | tr '\n' ' ')

  local wheel_libs
  ORIGINAL_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  wheel_libs=$(wheel_library_path)
  if [[ -n $wheel_libs ]]; then
    export LD_LIBRARY_PATH="$wheel_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  # FP32 stays FP32 in every library (the checks compare with the CPU at FP32 tolerances).
  export NVIDIA_TF32_OVERRIDE=0
  {
    date -u
    uname -a
    cat "$CARRY/MANIFEST"
    echo "pip-wheel library folders: ${wheel_libs:-none}"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}"
  } >"$WORK/environment.log" 2>&1

  # Every shared library the carried binaries need must resolve, else nothing below can run. A
  # runtime library this machine lacks, or has in a version too old, is taken from carry/lib
  # (copies prepare made of this project's build machine's), and only that one.
  local missing=() fallback_used=() lib
  unresolved_libraries >"$WORK/unresolved"
  if [[ -s $WORK/unresolved && -d $CARRY/lib ]]; then
    mkdir -p "$WORK/fallback-lib"
    for lib in $(cut -d' ' -f2 "$WORK/unresolved" | sort -u); do
      if [[ -f $CARRY/lib/$lib ]]; then
        ln -sf "$CARRY/lib/$lib" "$WORK/fallback-lib/$lib"
        fallback_used+=("$lib")
      fi
    done
    if ((${#fallback_used[@]})); then
      export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$WORK/fallback-lib"
      echo "carried copies used: ${fallback_used[*]}" >>"$WORK/environment.log"
      unresolved_libraries >"$WORK/unresolved"
    fi
  fi
  mapfile -t missing <"$WORK/unresolved"
  if ((${#missing[@]})); then
    local joined
    joined=$(printf '%s, ' "${missing[@]}")
    record libraries FAIL 0 0 "" "missing: ${joined%, }"
    echo "gpu_check: cannot start: missing shared libraries: ${joined%, } (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}; pip-wheel folders found: ${wheel_libs:-none})" >&2
    exit 2
  fi
  record libraries PASS 0 0 "every library found" "pip-wheel folders: ${wheel_libs:-none}${fallback_used:+; carried copies used: ${fallback_used[*]}}"

  stage_device_query  # always: the stages below need to know the device
  stage gpu_tests stage_gpu_tests
  stage seed_vs_cpu stage_seed_vs_cpu
  stage bench stage_bench
  stage probes stage_probes
  stage baseline stage_baseline
  stage kernels stage_kernels
  stage baseline_kernels stage_baseline_kernels
  stage stalls stage_stalls
  stage allreduce stage_allreduce
  stage nccl_all_gpus train_stage nccl_all_gpus all 2
  stage shared_gpu train_stage shared_gpu "[0,0]" 3
  stage pytorch stage_pytorch
  stage pytorch_compiled stage_pytorch_compiled
  stage sanitizer_probe stage_sanitizer
  stage memcheck stage_memcheck
  stage memcheck_train sanitize_training memcheck_train memcheck 45 'ERROR SUMMARY'
  # Shared-memory hazards: the tiled GEMM and the block reductions.
  stage racecheck sanitize_training racecheck racecheck 60 'RACECHECK SUMMARY|ERROR SUMMARY'

  write_summary
  echo
  echo "gpu_check: summary.json, summary.txt and logs.tar.gz are in $OUT_DIR"
  cat "$OUT_DIR/summary.txt"
  exit "$FAILED"
}

# ========================================= entry ==============================================

command=${1:-}
[[ $# -gt 0 ]] && shift
case "$command" in
  prepare)
    binaries=gpu
    carry=$ROOT/carry
    baseline=${GPU_CHECK_BASELINE:+rev:$GPU_CHECK_BASELINE}
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --binaries) binaries=${2:?--binaries needs gpu or a build folder}; shift 2 ;;
        --carry) carry=$(abs_path "${2:?--carry needs a folder}"); shift 2 ;;
        --baseline) baseline=rev:${2:?--baseline needs a commit}; shift 2 ;;
        --baseline-build) baseline=build:${2:?--baseline-build needs a build folder}; shift 2 ;;
        *) die "prepare: unknown option '$1'" ;;
      esac
    done
    prepare "$binaries" "$carry" gpu "$baseline"
    ;;
  run)
    carry=carry
    out=${OUT:-}
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --carry) carry=${2:?--carry needs a folder}; shift 2 ;;
        --out) out=${2:?--out needs a folder}; shift 2 ;;
        *) die "run: unknown option '$1'" ;;
      esac
    done
    [[ -n $out ]] || out=$ROOT/build/gpu_check/run
    MODE=run
    run_half "$carry" "$(abs_path "$out")"
    ;;
  rehearse)
    out=""
    reuse=0
    baseline=""
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --fast) FAST=1; shift ;;
        --reuse-carry) reuse=1; shift ;;
        --baseline-build) baseline=build:${2:?--baseline-build needs a build folder}; shift 2 ;;
        --out) out=${2:?--out needs a folder}; shift 2 ;;
        *) die "rehearse: unknown option '$1'" ;;
      esac
    done
    build=${GPU_CHECK_REHEARSE_BUILD:-build}
    [[ -n $out ]] || out=$ROOT/build/gpu_check/rehearse
    out=$(abs_path "$out")
    mkdir -p "$out" || die "cannot create $out"
    # Its own carry folder (under build/), so a prepared carry/ for the GPU machine stays as it is.
    rehearse_carry=$(abs_path "${GPU_CHECK_REHEARSE_CARRY:-build/gpu_check/rehearse-carry}")
    if ((reuse)); then
      [[ -d $rehearse_carry ]] || die "rehearse --reuse-carry: no carry folder at $rehearse_carry"
      [[ -z $baseline ]] || die "rehearse: --baseline-build packs a new carry folder; --reuse-carry keeps the old one (choose one)"
    else
      mkdir -p "$(dirname "$rehearse_carry")"
      (prepare "$build" "$rehearse_carry" rehearsal "$baseline") || die "rehearse: preparing the carry folder failed"
    fi
    MODE=rehearse
    run_half "$rehearse_carry" "$out"
    ;;
  *)
    sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    [[ $command == -h || $command == --help || $command == help ]] && exit 0
    exit 2
    ;;
esac
