#!/usr/bin/env bash
# CTest cases for the GPU check's scripts (scripts/check_needed.sh): every path that does not
# need a GPU runs here, so the first run on a GPU machine does not fail for a reason that could
# have been seen on this one.
#
# Usage: tests/gpu_check/gpu_check_tests.sh CASE SOURCE_DIR BUILD_DIR
#   needed_gpu_build   the GPU build's binaries (build-gpu/, scripts/build_gpu.sh) need only the
#                      libraries the GPU machine has
#   needed_rejects     check_needed.sh names a library outside the list, and accepts the list
set -uo pipefail
case_name=${1:?case}
root=${2:?source dir}
build=${3:?build dir}
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

  *)
    fail "unknown case '$case_name'"
    ;;
esac
echo "PASS: $case_name"
