#!/usr/bin/env bash
# The two-GPU prefill-to-decode hand-off over NCCL (examples/nccl/handoff.c;
# docs/pages.md, "Two GPUs over NCCL"), run (and built when the build
# folder has no copy) in one call on a machine with two GPUs (the lent
# nvidia-h200-x2):
#
#   bash examples/nccl/run.sh [NCCL] [-- ARGUMENTS...]
#
# NCCL says where NCCL's header and library come from: a wheel
# (nvidia_nccl_cu*.whl, unpacked here), or a folder holding nccl.h and
# libnccl.so.2 somewhere below it. Default: the first
# .device/wheels/nvidia_nccl_cu*.whl, else python3's installed NVIDIA NCCL
# package (the device image has nvidia-nccl-cu13), else the system's
# libnccl.so.2. The library: $SSM_BUILD (a build folder with
# .libs/libssmstate.so and the mode plugins), else the build that
# tests/gpu/device_check.sh leaves in .device/build, made first when absent
# (as bench/device_bench.sh does). A build configured where nccl.h was found
# (configure --with-nccl[=DIR]) has the program already, built by `make` as
# examples/nccl/handoff: that copy is run. Otherwise the script compiles it here
# against that build's library (with the NCCL header it finds, if any). The
# program is never linked with NCCL: it loads the library found below, or,
# where none is found and the build has the program, the program's default
# (configure's DIR/lib/libnccl.so.2, else libnccl.so.2 on the loader's path).
# ARGUMENTS go to the program (its defaults:
# examples/qwen3-next.ini, 32 requests, prompts 64..2048, 16 decode steps,
# fp32 state; --state bf16 for a bf16 state).
#
# Writes to $OUT (else .device/out): nccl_handoff.txt (the program's output),
# nccl_handoff.json, nccl_topo.txt (nvidia-smi topo -m) and
# nccl_handoff_build.txt (the compiler's output, or which built program
# ran). Exit: the program's (0 pass, 1 mismatch or failure,
# 2 bad usage, 77 fewer than two GPUs or no NCCL), or 1 when the build fails.
set -uo pipefail
root=$PWD
out=${OUT:-$root/.device/out}
work=$root/.device/nccl_handoff
mkdir -p "$out" "$work"
# Point-to-point needs no NVLink multicast; on a shared host it stays off.
# NCCL's warnings say why a transport failed (no peer access, /dev/shm).
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN}

nccl_source=
if [ $# -gt 0 ] && [ "$1" != -- ]; then
    nccl_source=$1
    shift
fi
[ "${1:-}" = -- ] && shift

# Prints the folders python3's NVIDIA packages live in (none: nothing).
nvidia_packages() {
    python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null
}

# Unpacks NCCL's headers and library from wheel $1 into $2.
unpack_wheel() {
    rm -rf "$2" && mkdir -p "$2" &&
        python3 - "$1" "$2" <<'PY'
import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
for name in wheel.namelist():
    if "/include/" in name or "/libnccl.so" in name:
        wheel.extract(name, sys.argv[2])
PY
}

# Sets nccl_h (may stay empty: the program declares what it needs) and
# nccl_lib from $nccl_source or the defaults above; 1 when no library is found.
find_nccl() {
    local source=$nccl_source dirs=()
    [ -z "$source" ] &&
        source=$(ls "$root"/.device/wheels/nvidia_nccl_cu*.whl 2>/dev/null | head -1)
    if [ -n "$source" ]; then
        case $source in
        *.whl)
            unpack_wheel "$source" "$work/wheel" || return 1
            dirs=("$work/wheel")
            ;;
        *) dirs=("$source") ;;
        esac
    else
        mapfile -t dirs < <(nvidia_packages)
    fi
    nccl_lib=
    [ ${#dirs[@]} -gt 0 ] &&
        nccl_lib=$(find "${dirs[@]}" -name 'libnccl.so*' 2>/dev/null | sort | head -1)
    nccl_h=
    [ ${#dirs[@]} -gt 0 ] && nccl_h=$(find "${dirs[@]}" -name nccl.h 2>/dev/null | head -1)
    if [ -z "$nccl_lib" ] && [ -z "$nccl_source" ]; then
        nccl_lib=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
    fi
    [ -n "$nccl_lib" ]
}

# The library's build: $SSM_BUILD, or .device/build's (built when absent).
if [ -n "${SSM_BUILD:-}" ]; then
    build=$SSM_BUILD
else
    if ! ls "$root"/.device/build/ssmstate-*/.libs/libssmstate.so >/dev/null 2>&1; then
        SSM_DEVICE_BUILD_ONLY=1 bash tests/gpu/device_check.sh >"$out/device_build.txt" 2>&1 ||
            { tail -30 "$out/device_build.txt"; exit 1; }
    fi
    build=$(echo "$root"/.device/build/ssmstate-*/)
fi
headers=$build/include
[ -f "$headers/ssmstate/ssmstate.h" ] || headers=$root/include
sysroot_lib=$root/.device/sysroot/usr/lib/x86_64-linux-gnu

# The build's own program (`make` built it with --with-nccl): libtool's
# wrapper, else the binary libtool keeps in .libs.
program=
for candidate in "${build%/}/examples/nccl/handoff" "${build%/}/examples/nccl/.libs/handoff"; do
    if [ -f "$candidate" ] && [ -x "$candidate" ]; then
        program=$candidate
        break
    fi
done

nccl_args=()
nccl_dir=
if find_nccl; then
    header=${nccl_h:-none, the program declares what it calls}
    [ -n "$program" ] && header="the build's, compiled by make"
    echo "NCCL: $nccl_lib (header: $header)"
    nccl_args=(--nccl "$nccl_lib")
    nccl_dir=$(dirname "$nccl_lib")
elif [ -n "$program" ] && [ -z "$nccl_source" ]; then
    echo "NCCL: none found here; the program's default library"
else
    where="the wheels in .device/wheels, the NVIDIA packages of python3 and ldconfig"
    [ -n "$nccl_source" ] && where=$nccl_source
    echo "nccl_handoff: SKIP: no NCCL library found in $where"
    exit 77
fi

if [ -n "$program" ]; then
    echo "nccl_handoff: built by make: $program" | tee "$out/nccl_handoff_build.txt"
else
    cuda=${CUDA_HOME:-/usr/local/cuda}
    flags=(-std=gnu11 -O2 -Wall -Wextra -I"$headers" -I"$cuda/include")
    [ -n "$nccl_h" ] && flags+=(-I"$(dirname "$nccl_h")")
    # shellcheck disable=SC2054 # -Wl, options are single words
    links=(-L"${build%/}/.libs" -lssmstate -L"$cuda/lib64" -lcudart -ldl -lm
        -Wl,-rpath,"${build%/}/.libs" -Wl,-rpath,"$cuda/lib64")
    # shellcheck disable=SC2054
    [ -d "$sysroot_lib" ] && links+=(-Wl,-rpath-link,"$sysroot_lib" -Wl,-rpath,"$sysroot_lib")
    if ! "${CC:-cc}" "${flags[@]}" examples/nccl/handoff.c -o "$work/nccl_handoff" "${links[@]}" \
        >"$out/nccl_handoff_build.txt" 2>&1; then
        cat "$out/nccl_handoff_build.txt"
        exit 1
    fi
    program=$work/nccl_handoff
fi

LD_LIBRARY_PATH="${build%/}/.libs:$sysroot_lib${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH SSMSTATE_PLUGIN_PATH="${build%/}/.libs"
nvidia-smi topo -m >"$out/nccl_topo.txt" 2>&1
"$program" "${nccl_args[@]}" --json "$out/nccl_handoff.json" "$@" 2>&1 |
    tee "$out/nccl_handoff.txt"
exit "${PIPESTATUS[0]}"
