#!/usr/bin/env bash
# Builds the CUDA library, plugins, command, every GPU test program
# and the chunk kernels' timing program here (nvcc
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
gpu_tests="check_gpu_modes check_chunk_cuda check_cuda_math check_pages_cuda check_pages_device
    check_tuning_cuda"
make -j"$(nproc)" libssmstate.la native.la compact.la replay.la ssmstate \
    $(for t in $gpu_tests; do echo "tests/gpu/$t"; done)
# The chunk kernels' own timing program (its comment has the command).
nvcc=$(sed -n 's/^NVCC = //p' Makefile)
arch=$(sed -n 's/^NVCC_ARCH = //p' Makefile)
"$nvcc" -std=c++17 -O3 --fmad=false $arch -I"$root" -I"$root/include" -I"$bld" \
    "$root/bench/bench_chunk.cu" -o bench_chunk
# The one-token update alone, by lane layout (bench_decode_unit.cu's comment).
"$nvcc" -std=c++17 -O3 $arch "$root/bench/bench_decode_unit.cu" -o bench_decode_unit
rm -rf "$stage" && mkdir -p "$stage/lib" "$stage/bin"
cp -a .libs/libssmstate.so* .libs/native.so .libs/compact.so .libs/replay.so "$stage/lib/"
cp .libs/ssmstate "$stage/bin/"
# The programs themselves, not libtool's wrappers; and the layout the
# tests' .gpu scripts expect of a build tree (SSM_TOP_BUILDDIR=$stage/bin).
mkdir -p "$stage/bin/tests/gpu"
for name in $gpu_tests; do
    t=tests/gpu/.libs/$name
    [ -f "$t" ] || t=tests/gpu/.libs/lt-$name
    [ -f "$t" ] || t=tests/gpu/$name
    cp "$t" "$stage/bin/$name"
    ln -s "../../$name" "$stage/bin/tests/gpu/$name"
done
cp bench_chunk bench_decode_unit "$stage/bin/"
# conform_cuda.gpu finds the plugins where a build tree keeps them.
ln -s ../lib "$stage/bin/.libs"
# What the device machine lacks: inih, and the CUDA runtime these were linked with.
for so in libinih.so.1 libcudart.so.13 libsubunit.so.0; do
    path=$(LD_LIBRARY_PATH=$stage/lib ldd "$stage/bin/ssmstate" | awk -v so="$so" '$1 == so { print $3 }')
    [ -n "$path" ] && cp -L "$path" "$stage/lib/"
done
echo "device_stage: $(du -sh "$stage" | cut -f1) in $stage (carry .device/stage)"
