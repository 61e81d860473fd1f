#!/usr/bin/env bash
# Runs the whole test suite, GPU tests included, on a machine with a GPU but
# without Autotools, inih or Check (the lent H200 machine). Expects in .device/:
# the release tarball (make dist) and the Debian packages libinih1, libinih-dev,
# check, libsubunit0 and libsubunit-dev (apt-get download), unpacked here into a
# private root. Prints the test summary; logs go to $OUT when it is set.
set -uo pipefail
root=$PWD
out=${OUT:-$root/.device/out}
mkdir -p "$out"
sys=$root/.device/sysroot
mkdir -p "$sys"
for deb in "$root"/.device/*.deb; do dpkg -x "$deb" "$sys"; done
lib=$sys/usr/lib/x86_64-linux-gnu
export INIH_CFLAGS="-I$sys/usr/include" INIH_LIBS="-L$lib -linih"
export LDFLAGS="-L$lib -Wl,-rpath-link,$lib -Wl,-rpath,$lib" LD_LIBRARY_PATH="$lib"
export CHECK_CFLAGS="-I$sys/usr/include -pthread" CHECK_LIBS="-L$lib -lcheck_pic -lsubunit -lrt -lm"
export PKG_CONFIG=/bin/true PATH="$PATH:/usr/local/cuda/bin"

# The build stays in .device/build, so a later call on the same (warm)
# machine can run the benchmark from it (bench/device_bench.sh).
work=$root/.device/build
rm -rf "$work" && mkdir -p "$work"
tar -xzf "$root"/.device/ssmstate-*.tar.gz -C "$work"
cd "$work"/ssmstate-*/ || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
./configure >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
grep -E "CUDA|plugins" "$out/configure.log" | tail -5
make -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
# SSM_DEVICE_BUILD_ONLY=1: stop after the build (bench/device_bench.sh).
[ "${SSM_DEVICE_BUILD_ONLY:-0}" = 1 ] && exit 0
make -j"$(nproc)" check >"$out/check.log" 2>&1
status=$?
cp test-suite.log "$out/" 2>/dev/null
cp tests/gpu/*.log "$out/" 2>/dev/null
grep -E "^(# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR)|(FAIL|ERROR|SKIP): )" test-suite.log | head -40
grep -E "^(ok|not ok)" tests/gpu/cuda_math.log | head -20
grep -E "^(PASS|FAIL|SKIP)|seed" tests/gpu/gpu_modes.log | tail -40
exit $status
