#!/usr/bin/env bash
# Checks that every binary named needs only the shared libraries a GPU machine with the NVIDIA
# driver and PyTorch's pip packages has: the C and C++ runtimes, zlib, OpenMP's runtime, and
# cuBLAS 13, cuDNN 9 and NCCL 2 (PyTorch's site-packages nvidia/*/lib). A binary built against
# anything else (libmpi, libopenblas, libyaml-cpp, a shared libcudart) would stop there at start,
# so scripts/build_gpu.sh and scripts/gpu_check.sh prepare run this on what they build, and CTest
# runs it on build-gpu/ (gpu_check_needed_gpu_build).
#
# Usage: scripts/check_needed.sh BINARY...
# Prints each binary's NEEDED entries; exit 0 when all are allowed, 1 when one is not (naming the
# binary and the library), 2 when a binary is missing or is not an ELF file.
set -euo pipefail
allowed=(
  ld-linux-x86-64.so.2 libc.so.6 libm.so.6  # glibc
  libstdc++.so.6 libgcc_s.so.1              # the C++ runtime
  libz.so.1                                 # gzip'd IDX files
  libgomp.so.1                              # the CPU backend's OpenMP
  libcublas.so.13 libcudnn.so.9 libnccl.so.2
)
if [ $# -eq 0 ]; then
  echo "usage: $0 BINARY..." >&2
  exit 2
fi
status=0
for binary in "$@"; do
  if [ ! -f "$binary" ]; then
    echo "check_needed: $binary does not exist (build it with scripts/build_gpu.sh)" >&2
    exit 2
  fi
  if ! dynamic=$(LC_ALL=C readelf -d "$binary" 2>&1); then
    echo "check_needed: $binary: readelf -d failed: $dynamic" >&2
    exit 2
  fi
  needed=$(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dynamic")
  extra=()
  for lib in $needed; do
    ok=0
    for a in "${allowed[@]}"; do [ "$lib" = "$a" ] && ok=1; done
    [ $ok -eq 1 ] || extra+=("$lib")
  done
  # The newest symbol versions it asks of glibc and libstdc++: the GPU machine's must be as new.
  versions=$(LC_ALL=C readelf -V "$binary" 2>/dev/null | grep -oE 'GLIBC(XX)?_[0-9]+(\.[0-9]+)+' |
    sort -u -V | awk -F_ '{top[$1] = $0} END {for (k in top) printf "%s ", top[k]}')
  echo "$binary needs: $(echo $needed)${versions:+ (newest symbol versions: ${versions% })}"
  if [ ${#extra[@]} -gt 0 ]; then
    echo "check_needed: $binary needs ${extra[*]}, which the GPU machine does not have;" \
      "allowed: ${allowed[*]}" >&2
    status=1
  fi
done
exit $status
