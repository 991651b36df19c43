#!/usr/bin/env bash
# Fails when a C++/CUDA source differs from what clang-format 14 (Debian 12's, the version
# .clang-format was written for) would make of it, listing the files and a first diff.
# Fix with: clang-format-14 -i FILE...
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tool=""
for candidate in clang-format-14 clang-format; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" --version | grep -q 'version 14\.'; then
    tool="$candidate"
    break
  fi
done
if [ -z "$tool" ]; then
  echo "check_format: clang-format 14 not found (scripts/setup.sh installs clang-format-14)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! "$tool" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} file(s) are not formatted as .clang-format says:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  diff -u "${bad[0]}" <("$tool" "${bad[0]}") | head -n 40 >&2 || true
  echo "fix with: $tool -i ${bad[*]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted ($tool)"
