#!/usr/bin/env bash
# Builds the CUDA library, plugins, command and GPU mode test here (nvcc
# compiles and links on a machine without a GPU) and stages them with the
# shared libraries they need in .device/stage/, so that a device call only
# runs them (bench/device_quick.sh) instead of spending its time on nvcc.
# Out of tree in .device/bld; the source tree must be unconfigured.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bld=$root/.device/bld stage=$root/.device/stage
mkdir -p "$bld"
cd "$bld"
[ -f Makefile ] || "$root/configure" -q
grep -q "^#define HAVE_NVCC 1" config.h || { echo "device_stage: no nvcc found by configure" >&2; exit 1; }
make -j"$(nproc)" libssmstate.la native.la compact.la replay.la ssmstate tests/gpu/check_gpu_modes
rm -rf "$stage" && mkdir -p "$stage/lib" "$stage/bin"
cp -a .libs/libssmstate.so* .libs/native.so .libs/compact.so .libs/replay.so "$stage/lib/"
cp .libs/ssmstate "$stage/bin/"
t=tests/gpu/.libs/check_gpu_modes
[ -f "$t" ] || t=tests/gpu/.libs/lt-check_gpu_modes
cp "$t" "$stage/bin/check_gpu_modes"
# What the device machine lacks: inih, and the CUDA runtime these were linked with.
for so in libinih.so.1 libcudart.so.13 libsubunit.so.0; do
    path=$(LD_LIBRARY_PATH=$stage/lib ldd "$stage/bin/ssmstate" | awk -v so="$so" '$1 == so { print $3 }')
    [ -n "$path" ] && cp -L "$path" "$stage/lib/"
done
echo "device_stage: $(du -sh "$stage" | cut -f1) in $stage (carry .device/stage)"
