#!/usr/bin/env bash
# CTest cases for the GPU check's scripts (scripts/gpu_check.sh, scripts/check_needed.sh): every
# path that does not need a GPU runs here, so the first run on a GPU machine does not fail for a
# reason that could have been seen on this one.
#
# Usage: tests/gpu_check/gpu_check_tests.sh CASE SOURCE_DIR BUILD_DIR
#   needed_gpu_build   the GPU build's binaries (build-gpu/, scripts/build_gpu.sh) need only the
#                      libraries the GPU machine has
#   needed_rejects     check_needed.sh names a library outside the list, and accepts the list
#   prepare_limit      prepare packs a carry folder within the size limit and refuses over it;
#                      it packs an A/B baseline binary, and refuses a baseline commit that
#                      does not exist
#   missing_library    the run half stops with one line when a carried binary (the baseline's
#                      too) lacks a library
#   rehearse           the whole run half on this machine's build (fast mode); sets up the
#                      rehearsal carry folder the next two cases reuse
#   budget_spent       stages that no longer fit the budget are SKIP, never FAIL
#   missing_data       without data in the carry folder the training stages are SKIP
#   seed_mismatch      the seed stage FAILs when the losses leave the CPU's by more than its bound
#   baseline_ab        with a stand-in baseline binary in the carry folder, the baseline stage
#                      runs it with the bench stage's arguments, alternating with the carried
#                      binary, and gives this build's samples/s over the baseline's per engine;
#                      a baseline that fails makes the stage FAIL, naming its exit status
#   pytorch_ratio      with a stand-in PyTorch (a python3 on PATH answering for torch), the pytorch
#                      stage gives each benchmarked engine's samples/s over PyTorch's, at one batch
#   stalls_summary     scripts/ncu_stalls.py (the `stalls` stage's summary) on a small source page
#                      in ncu's CSV layout: names, samples, stall shares and the hottest stretch;
#                      a file that is not such a page is refused with exit 2 and a reason
set -uo pipefail
case_name=${1:?case}
root=${2:?source dir}
build=${3:?build dir}
check=$root/scripts/gpu_check.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
expect_grep() {  # expect_grep PATTERN FILE WHAT
  grep -qE -- "$1" "$2" || {
    echo "---- $2" >&2
    cat "$2" >&2
    fail "$3: no line matches /$1/"
  }
}
# A stage's status in a summary.json, e.g. stage_status FILE bench -> SKIP
stage_status() {
  python3 - "$1" "$2" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
print(next((s["status"] for s in summary["stages"] if s["name"] == sys.argv[2]), "absent"))
PY
}
# A named figure of a summary.json, e.g. figure_value FILE samples_per_s_native; fails if absent
figure_value() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["figures"][sys.argv[2]])' "$1" "$2"
}
# copy_rehearsal_carry DEST: the rehearse case's carry folder, hard-linked where possible (replace
# a file before changing it, or the original changes too)
copy_rehearsal_carry() {
  [[ -d $rehearsal_carry ]] || fail "no rehearsal carry folder (the rehearse case makes it)"
  cp -al "$rehearsal_carry" "$1" 2>/dev/null || cp -a "$rehearsal_carry" "$1"
}
# tiny_binary OUT [LIB]: a small executable that exits 0; with LIB, it needs the shared library
# libLIB.so, which is moved to $work/kept/ afterwards, so the loader cannot find it.
tiny_binary() {
  local out=$1 lib=${2:-}
  printf 'int main(void) { return 0; }\n' >"$work/main.c"
  if [[ -n $lib ]]; then
    printf 'int %s_f(void) { return 1; }\n' "$lib" >"$work/$lib.c"
    cc -shared -fPIC -o "$work/lib$lib.so" "$work/$lib.c" || fail "cc"
    printf 'int %s_f(void);\nint main(void) { return %s_f() - 1; }\n' "$lib" "$lib" >"$work/main.c"
    cc -o "$out" "$work/main.c" -L"$work" -l"$lib" -Wl,--no-as-needed || fail "cc"
    mkdir -p "$work/kept"
    mv "$work/lib$lib.so" "$work/kept/"
  else
    cc -o "$out" "$work/main.c" || fail "cc"
  fi
}
rehearsal_carry=$build/gpu_check/ctest-carry

case "$case_name" in
  needed_gpu_build)
    gpu_build=${GPU_BUILD_DIR:-$root/build-gpu}
    "$root/scripts/check_needed.sh" "$gpu_build/bin/mnist-train" "$gpu_build/tests/gpu_tests" ||
      fail "the GPU binaries in $gpu_build need more than the GPU machine has (scripts/test.sh builds them with scripts/build_gpu.sh)"
    ;;

  needed_rejects)
    tiny_binary "$work/plain"
    "$root/scripts/check_needed.sh" "$work/plain" >"$work/out" 2>&1 || fail "a libc-only binary was refused"
    tiny_binary "$work/extra" mpi_stand_in
    "$root/scripts/check_needed.sh" "$work/plain" "$work/extra" >"$work/out" 2>&1
    rc=$?
    [[ $rc == 1 ]] || fail "exit $rc for a binary needing libmpi_stand_in.so (want 1)"
    expect_grep 'extra needs libmpi_stand_in\.so, which the GPU machine does not have' "$work/out" \
      "the refusal names the binary and the library"
    ;;

  prepare_limit)
    # A build folder holding two small binaries and no data: prepare packs them (no CPU
    # reference without data), then refuses the same under a limit of 0 MiB.
    mkdir -p "$work/build/bin" "$work/build/tests"
    tiny_binary "$work/build/bin/mnist-train"
    tiny_binary "$work/build/tests/gpu_tests"
    GPU_CHECK_DATA_ROOT=$work/no-data "$check" prepare --binaries "$work/build" \
      --carry "$work/carry" >"$work/out" 2>&1 || { cat "$work/out"; fail "prepare within the limit failed"; }
    [[ -x $work/carry/bin/mnist-train && -x $work/carry/bin/gpu_tests ]] || fail "binaries not packed"
    grep -qx 'kind=gpu' "$work/carry/MANIFEST" || fail "MANIFEST does not say kind=gpu"
    expect_grep 'carry .* \+ working tree .* = .* of the 60 MiB allowed' "$work/out" "the size is printed"
    expect_grep 'no MNIST files' "$work/out" "missing data is reported"
    GPU_CHECK_LIMIT_MIB=0 GPU_CHECK_DATA_ROOT=$work/no-data "$check" prepare \
      --binaries "$work/build" --carry "$work/carry2" >"$work/out" 2>&1
    rc=$?
    [[ $rc == 2 ]] || fail "exit $rc over the limit (want 2)"
    expect_grep 'refused: the working tree and the carry folder come to .*, over 0 MiB' "$work/out" \
      "the refusal says why"
    [[ ! -e $work/carry2 ]] || fail "a refused carry folder was left behind"
    # An A/B baseline from a build folder: packed beside the binaries, named in the MANIFEST.
    mkdir -p "$work/base/bin"
    tiny_binary "$work/base/bin/mnist-train"
    GPU_CHECK_DATA_ROOT=$work/no-data "$check" prepare --binaries "$work/build" \
      --baseline-build "$work/base" --carry "$work/carry3" >"$work/out" 2>&1 ||
      { cat "$work/out"; fail "prepare with a baseline failed"; }
    cmp -s "$work/base/bin/mnist-train" "$work/carry3/baseline/bin/mnist-train" ||
      fail "the baseline binary is not packed as baseline/bin/mnist-train"
    grep -qx "baseline=the build in $work/base" "$work/carry3/MANIFEST" ||
      { cat "$work/carry3/MANIFEST"; fail "MANIFEST does not name the baseline"; }
    expect_grep 'binaries [0-9.]+ MiB with the baseline,' "$work/out" "the size counts the baseline"
    # A baseline commit that does not exist is refused before anything is built.
    GPU_CHECK_DATA_ROOT=$work/no-data "$check" prepare --binaries "$work/build" \
      --baseline no-such-commit --carry "$work/carry4" >"$work/out" 2>&1
    rc=$?
    [[ $rc == 2 ]] || fail "exit $rc for a baseline commit that does not exist (want 2)"
    expect_grep "--baseline: 'no-such-commit' names no commit of this repository" "$work/out" \
      "the refusal names the commit"
    [[ ! -e $work/carry4 ]] || fail "a refused carry folder was left behind"
    ;;

  missing_library)
    mkdir -p "$work/carry/bin"
    tiny_binary "$work/carry/bin/mnist-train" gone_stand_in
    echo kind=gpu >"$work/carry/MANIFEST"
    "$check" run --carry "$work/carry" --out "$work/out" >"$work/stdout" 2>"$work/stderr"
    rc=$?
    [[ $rc == 2 ]] || fail "exit $rc with a missing library (want 2)"
    [[ $(wc -l <"$work/stderr") == 1 ]] || { cat "$work/stderr"; fail "not one line on stderr"; }
    expect_grep '^gpu_check: cannot start: missing shared libraries: mnist-train: libgone_stand_in\.so' \
      "$work/stderr" "the line names the binary and the library"
    [[ $(stage_status "$work/out/summary.json" libraries) == FAIL ]] || fail "summary: libraries not FAIL"
    # With a copy in carry/lib the run half uses it, says so, and goes on: this stand-in binary
    # lists no GPU, so the device query FAILs and the GPU stages are SKIP.
    mkdir -p "$work/carry/lib"
    cp "$work/kept/libgone_stand_in.so" "$work/carry/lib/"
    chmod -x "$work/carry/bin/mnist-train"  # the executable bit may not survive the copy there
    "$check" run --carry "$work/carry" --out "$work/out" >"$work/stdout" 2>"$work/stderr"
    rc=$?
    [[ $rc == 1 ]] || { cat "$work/stdout" "$work/stderr"; fail "exit $rc with the carried copy (want 1)"; }
    [[ $(stage_status "$work/out/summary.json" libraries) == PASS ]] || fail "libraries not PASS"
    [[ -x $work/carry/bin/mnist-train ]] || fail "the run half did not restore the executable bit"
    expect_grep 'carried copies used: libgone_stand_in\.so' "$work/out/summary.txt" "the copy is named"
    [[ $(stage_status "$work/out/summary.json" device_query) == FAIL ]] || fail "device_query not FAIL"
    expect_grep 'bench +SKIP .*no GPU \(device query failed\)' "$work/out/summary.txt" \
      "stages after a failed device query"
    [[ $(tail -n 1 "$work/stdout") == "RESULT: FAIL" ]] || fail "the summary is not printed last"
    rm -rf "$work/carry/lib"
    # A rehearsal's carry folder is refused by the real run half.
    echo kind=rehearsal >"$work/carry/MANIFEST"
    "$check" run --carry "$work/carry" --out "$work/out" >"$work/stdout" 2>"$work/stderr"
    rc=$?
    [[ $rc == 2 ]] || fail "exit $rc for a rehearsal carry (want 2)"
    expect_grep 'not GPU ones' "$work/stderr" "a rehearsal carry is refused"
    # A baseline binary lacking a library is named as the baseline's.
    mkdir -p "$work/carry/baseline/bin"
    mv "$work/carry/bin/mnist-train" "$work/carry/baseline/bin/mnist-train"
    tiny_binary "$work/carry/bin/mnist-train"
    echo kind=gpu >"$work/carry/MANIFEST"
    "$check" run --carry "$work/carry" --out "$work/out" >"$work/stdout" 2>"$work/stderr"
    rc=$?
    [[ $rc == 2 ]] || fail "exit $rc with a baseline missing a library (want 2)"
    expect_grep '^gpu_check: cannot start: missing shared libraries: baseline/mnist-train: libgone_stand_in\.so' \
      "$work/stderr" "the line names the baseline's binary"
    ;;

  rehearse)
    out=$build/gpu_check/ctest-rehearse
    rm -rf "$out"
    GPU_CHECK_REHEARSE_BUILD=$build GPU_CHECK_REHEARSE_CARRY=$rehearsal_carry \
      "$check" rehearse --fast --out "$out" >"$work/stdout" 2>&1
    rc=$?
    cat "$work/stdout"
    [[ $rc == 0 ]] || fail "the rehearsal exited $rc"
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$out/summary.json" ||
      fail "summary.json is not JSON"
    [[ $(tail -n 1 "$work/stdout") == "RESULT: PASS" ]] || fail "the summary is not printed last"
    names=$(python3 -c 'import json, sys; print(" ".join(s["name"] for s in json.load(open(sys.argv[1]))["stages"]))' "$out/summary.json")
    [[ $names == "libraries device_query gpu_tests seed_vs_cpu bench probes baseline kernels baseline_kernels stalls allreduce nccl_all_gpus shared_gpu pytorch pytorch_compiled sanitizer_probe memcheck memcheck_train racecheck" ]] ||
      fail "stages out of order or missing: $names"
    [[ -s $out/logs.tar.gz && -s $out/summary.txt ]] || fail "logs or table missing"
    # The CPU stand-in runs the same binary as the CPU reference: the losses agree exactly.
    expect_grep 'seed_vs_cpu +SKIP .*native max\|dloss\| 0 over 5 steps' "$out/summary.txt" \
      "the seed stage compared the losses"
    expect_grep 'bench +SKIP .*native [0-9.]+ samples/s' "$out/summary.txt" "the benchmark figure"
    expect_grep '"samples_per_s_native_b256":[0-9.]+' "$out/summary.json" \
      "the benchmark figure named by its batch"
    expect_grep 'probes +SKIP .*(no GPU|not in the carry folder)' "$out/summary.txt" \
      "the device micro-checks need a GPU"
    expect_grep 'allreduce +SKIP .*cpu_x2 [0-9.]+ us' "$out/summary.txt" "the all-reduce figure"
    expect_grep 'kernels +SKIP +0 +no (GPU|ncu)' "$out/summary.txt" "the per-kernel stage needs a GPU"
    expect_grep 'baseline +SKIP +0 +no baseline in the carry folder' "$out/summary.txt" \
      "the A/B stage without a baseline"
    expect_grep 'stalls +SKIP +0 +no (GPU|ncu)' "$out/summary.txt" "the stall stage needs a GPU"
    expect_grep 'nccl_all_gpus +SKIP .*done: 5 steps' "$out/summary.txt" "the NCCL stage's stand-in"
    expect_grep '"samples_per_s_native":[0-9.]+' "$out/summary.json" "figures in the JSON"
    ;;

  budget_spent)
    [[ -d $rehearsal_carry ]] || fail "no rehearsal carry folder (the rehearse case makes it)"
    out=$work/out
    GPU_CHECK_BUDGET_S=25 GPU_CHECK_REHEARSE_CARRY=$rehearsal_carry \
      "$check" rehearse --fast --reuse-carry --out "$out" >"$work/stdout" 2>&1 ||
      { cat "$work/stdout"; fail "a spent budget made the check fail"; }
    for stage in gpu_tests seed_vs_cpu bench allreduce nccl_all_gpus shared_gpu pytorch; do
      [[ $(stage_status "$out/summary.json" "$stage") == SKIP ]] || fail "$stage is not SKIP"
    done
    expect_grep 'gpu_tests +SKIP .*budget spent: [0-9]+ s left of 25, the stage needs up to 150' \
      "$out/summary.txt" "the skip says why"
    ;;

  missing_data)
    copy_rehearsal_carry "$work/carry"
    rm -rf "$work/carry/data" "$work/carry/reference"
    out=$work/out
    GPU_CHECK_REHEARSE_CARRY=$work/carry "$check" rehearse --fast --reuse-carry --out "$out" \
      >"$work/stdout" 2>&1 || { cat "$work/stdout"; fail "missing data made the check fail"; }
    for stage in seed_vs_cpu nccl_all_gpus shared_gpu; do
      [[ $(stage_status "$out/summary.json" "$stage") == SKIP ]] || fail "$stage is not SKIP"
    done
    expect_grep 'seed_vs_cpu +SKIP +0 +no MNIST data in the carry folder' "$out/summary.txt" \
      "the skip says why"
    ;;

  seed_mismatch)
    copy_rehearsal_carry "$work/carry"
    # A new reference file (not the hard link): the third step's loss moved by 0.01.
    ref=$work/carry/reference/seed_cpu.jsonl
    python3 - "$rehearsal_carry/reference/seed_cpu.jsonl" "$ref.new" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
lines[2]["loss"] += 0.01
open(sys.argv[2], "w").write("".join(json.dumps(l, separators=(",", ":")) + "\n" for l in lines))
PY
    rm -f "$ref" && mv "$ref.new" "$ref"
    out=$work/out
    GPU_CHECK_ONLY=seed_vs_cpu GPU_CHECK_REHEARSE_CARRY=$work/carry "$check" rehearse --fast \
      --reuse-carry --out "$out" >"$work/stdout" 2>&1
    rc=$?
    [[ $rc == 1 ]] || { cat "$work/stdout"; fail "exit $rc with a moved loss (want 1)"; }
    [[ $(stage_status "$out/summary.json" seed_vs_cpu) == FAIL ]] || fail "seed_vs_cpu not FAIL"
    expect_grep 'seed_vs_cpu +FAIL .*native max\|dloss\| 0\.01 over 5 steps \(out of bounds\)' \
      "$out/summary.txt" "the figure shows the difference"
    expect_grep 'bench +SKIP .*not selected \(GPU_CHECK_ONLY=seed_vs_cpu\)' "$out/summary.txt" \
      "the stages left out"
    ;;

  baseline_ab)
    copy_rehearsal_carry "$work/carry"
    # A stand-in baseline: its bench prints 1000 samples/s for each engine asked and records its
    # arguments; STAND_IN_EXIT makes it fail. A new MANIFEST (not the hard link) names it.
    mkdir -p "$work/carry/baseline/bin"
    cat >"$work/carry/baseline/bin/mnist-train" <<STANDIN
#!/usr/bin/env bash
echo "\$*" >>"$work/baseline_args"
if [[ -n \${STAND_IN_EXIT:-} ]]; then echo "stand-in baseline: failing on purpose" >&2; exit "\$STAND_IN_EXIT"; fi
all="\$*"
engines=\${all##*--engines }
for engine in \${engines//,/ }; do
  echo "engine \$engine, cpu: batch 256, 3 timed steps: 256.00 ms/step, 1000 samples/s (stand-in)"
done
STANDIN
    chmod +x "$work/carry/baseline/bin/mnist-train"
    { grep -v '^baseline' "$rehearsal_carry/MANIFEST"; echo "baseline=stand-in"; } >"$work/manifest"
    rm -f "$work/carry/MANIFEST" && mv "$work/manifest" "$work/carry/MANIFEST"
    out=$work/out
    GPU_CHECK_ONLY=baseline,baseline_kernels GPU_CHECK_REHEARSE_CARRY=$work/carry "$check" rehearse \
      --fast --reuse-carry --out "$out" >"$work/stdout" 2>&1 ||
      { cat "$work/stdout"; fail "the check failed with a stand-in baseline"; }
    grep -E "^baseline" "$out/summary.txt"
    expect_grep 'bench --batch 256 --steps 3 --warmup 1 --engines native$' "$work/baseline_args" \
      "the baseline ran the bench stage's benchmark"
    rate=$(figure_value "$out/summary.json" ab_samples_per_s_native) ||
      fail "no figure of this build's from the baseline stage"
    want=$(awk -v a="$rate" 'BEGIN { printf "%.3f", a / 1000 }')
    expect_grep "^baseline +SKIP .*native ${want}x \\($rate vs 1000 samples/s\\); .*baseline stand-in, best of 1" \
      "$out/summary.txt" "this build's samples/s over the baseline's"
    expect_grep "\"speedup_vs_baseline_native\":${want}" "$out/summary.json" "the speed-up among the figures"
    expect_grep '"baseline_samples_per_s_native":1000' "$out/summary.json" "the baseline's figure"
    expect_grep 'baseline_kernels +SKIP +0 +no (GPU|ncu)' "$out/summary.txt" "the per-kernel A/B needs a GPU"
    # A baseline that fails: the stage FAILs and says whose exit it was.
    STAND_IN_EXIT=3 GPU_CHECK_ONLY=baseline GPU_CHECK_REHEARSE_CARRY=$work/carry "$check" rehearse \
      --fast --reuse-carry --out "$out" >"$work/stdout" 2>&1
    rc=$?
    [[ $rc == 1 ]] || { cat "$work/stdout"; fail "exit $rc with a failing baseline (want 1)"; }
    expect_grep "^baseline +FAIL .*native: no figure; .*the baseline's exit 3: stand-in baseline: failing on purpose" \
      "$out/summary.txt" "the failure names the baseline's exit"
    ;;

  pytorch_ratio)
    [[ -d $rehearsal_carry ]] || fail "no rehearsal carry folder (the rehearse case makes it)"
    # python3 that imports "torch" and runs bench_pytorch.py as a stand-in at 1000 samples/s;
    # everything else goes to the real python3.
    real_python=$(command -v python3)
    mkdir -p "$work/bin"
    cat >"$work/bin/python3" <<SHIM
#!/usr/bin/env bash
if [[ \$* == *"import torch"* ]]; then echo "torch 0.0-stand-in cuda False"; exit 0; fi
if [[ \${1:-} == *bench_pytorch.py ]]; then
  if [[ \$* == *max-autotune* ]]; then
    echo "pytorch 0.0-stand-in compiled (max-autotune) on cpu: batch 256, 3 steps: 128.000 ms/step, 2000 samples/s (warm-up 9.0 s)"
    echo "pytorch 0.0-stand-in compiled (reduce-overhead) on cpu: skipped: reduce-overhead is CUDA graphs, and the device is not a GPU"
  else
    echo "pytorch 0.0-stand-in eager on cpu: batch 256, 3 steps: 256.000 ms/step, 1000 samples/s (warm-up 0.3 s)"
  fi
  exit 0
fi
exec "$real_python" "\$@"
SHIM
    chmod +x "$work/bin/python3"
    out=$work/out
    PATH="$work/bin:$PATH" GPU_CHECK_ONLY=bench,pytorch,pytorch_compiled GPU_CHECK_REHEARSE_CARRY=$rehearsal_carry \
      "$check" rehearse --fast --reuse-carry --out "$out" >"$work/stdout" 2>&1 ||
      { cat "$work/stdout"; fail "the check failed with a stand-in PyTorch"; }
    grep -E "^(bench|pytorch) " "$out/summary.txt"
    rate=$(figure_value "$out/summary.json" samples_per_s_native) ||
      fail "no native figure from the bench stage"
    want=$(awk -v a="$rate" 'BEGIN { printf "%.2f", a / 1000 }')
    expect_grep "pytorch +SKIP .*1000 samples/s \\(eager, batch 256\\); the engines against it: native ${want}x" \
      "$out/summary.txt" "the ratio of the bench's native figure to PyTorch's"
    expect_grep "\"ratio_to_pytorch_native\":${want}" "$out/summary.json" "the ratio among the figures"
    # The compiled stage: the faster compiled mode's figure, the ratio to it, the skipped mode named.
    want=$(awk -v a="$rate" 'BEGIN { printf "%.2f", a / 2000 }')
    expect_grep "pytorch_compiled +SKIP .*max-autotune 2000 samples/s \\(batch 256\\); the engines against the faster \\(max-autotune\\): native ${want}x.*skipped reduce-overhead: reduce-overhead is CUDA graphs" \
      "$out/summary.txt" "the ratio to compiled PyTorch"
    expect_grep "\"ratio_to_pytorch_compiled_native\":${want}" "$out/summary.json" \
      "the compiled ratio among the figures"
    expect_grep "\"pytorch_max_autotune_samples_per_s\":2000" "$out/summary.json" \
      "each compiled mode's figure"
    ;;

  stalls_summary)
    # Two kernels as ncu prints them (a "Kernel Name" row, the column header, one row per SASS
    # instruction), the first printed twice; 10 samples in the first, 4 in the second.
    page=$work/source.csv
    header='"Address","Source","# Samples","Instructions Executed","stall_long_sb","stall_barrier","stall_long_sb (Not Issued)"'
    {
      for _ in 1 2; do
        echo '"Kernel Name","void mnist::cuda::<unnamed>::conv_kernel<mnist::cuda::<unnamed>::Shape<(int)6, (int)12>, mnist::cuda::PlainSource>(T1, int)",'
        echo "$header"
        echo '"0x0","  LDG.E R2, desc[UR4][R2.64]","6","4096","6","0","5"'
        echo '"0x10","  FFMA R4, R2, R3, R4","1","4096","0","0","0"'
        echo '"0x20","@P0 BAR.SYNC.DEFER_BLOCKING 0x0","3","128","0","3","0"'
      done
      echo '"Kernel Name","mnist::cuda::<unnamed>::head_kernel(int, const float *)",'
      echo "$header"
      echo '"0x0","  FFMA R1, R2, R3, R1","4","512","4","0","4"'
    } >"$page"
    python3 "$root/scripts/ncu_stalls.py" "$page" --window 2 >"$work/out" 2>&1 ||
      { cat "$work/out"; fail "ncu_stalls.py refused a well-formed page"; }
    cat "$work/out"
    [[ $(grep -c '^== ' "$work/out") == 2 ]] || fail "a kernel printed twice is summarized twice"
    expect_grep '^== conv_kernel<Shape<6, 12>, PlainSource>: 10 samples, 3 instructions, 8,320 warp'       "$work/out" "the first kernel: short name with its template, samples, instructions"
    expect_grep 'waiting on: long_sb 60%, barrier 30%' "$work/out"       "stall shares, issued samples only, largest first"
    expect_grep 'runs: +LDG 49%, FFMA 49%, BAR 2%' "$work/out" "the instruction mix, by runs"
    expect_grep '\[ +0, +2\) +70\.0% of samples, ran up to 4,096x, 1 FFMA of 2; hottest: LDG'       "$work/out" "the hottest stretch and its hottest instruction"
    expect_grep '^== head_kernel: 4 samples' "$work/out" "the second kernel"
    expect_grep '^   waiting on: long_sb 100%$' "$work/out" "reasons with no sample left out"
    echo 'just,some,csv' >"$work/not_ncu.csv"
    python3 "$root/scripts/ncu_stalls.py" "$work/not_ncu.csv" >"$work/out" 2>&1
    rc=$?
    [[ $rc == 2 ]] || fail "exit $rc for a file that is not a source page (want 2)"
    expect_grep "not_ncu.csv: no kernel .*not ncu's --page source --csv output" "$work/out" \
      "the refusal names the file and the reason"
    ;;

  *)
    fail "unknown case '$case_name'"
    ;;
esac
echo "PASS: $case_name"
