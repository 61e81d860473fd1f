#!/usr/bin/env bash
# Per-kernel device times of one decode period, on the lent H200: ncu times
# every prologue, recurrence, identity and commit kernel of the warm-up
# decode steps that `ssmstate bench` runs before it measures (2L steps, so a
# whole fold period of replay), at B = 256, one layer, fp32 state, for
# native, replay (exact) and replay (identity). Prints, per kernel: count,
# median, max and mean in µs, and for replay the step kernel's time step by
# step (it grows with the history n and peaks at the fold). Then one MTP
# round (a = 3, the bench's NVTX range) of compact and of native, with ncu's
# sections on memory and on where warps stall (PROFILE_ROUNDS=0 skips it).
# ncu fixes the clocks, so times run about 10% above the benchmark's.
# Uses the build tests/gpu/device_check.sh leaves in .device/build (builds
# it when absent); writes the raw CSV to $OUT.
set -uo pipefail
root=$PWD
out=${OUT:-$root/.device/out}
mkdir -p "$out"
if ! ls "$root"/.device/build/ssmstate-*/.libs/ssmstate >/dev/null 2>&1; then
    SSM_DEVICE_BUILD_ONLY=1 bash tests/gpu/device_check.sh >"$out/device_build.txt" 2>&1 ||
        { tail -30 "$out/device_build.txt"; exit 1; }
fi
build=$(echo "$root"/.device/build/ssmstate-*/)
lib=$root/.device/sysroot/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$build/.libs:$lib" SSMSTATE_PLUGIN_PATH="$build/.libs"
ncu=${NCU:-/usr/local/cuda/bin/ncu}

# name, kernels to capture, then the arguments of one `ssmstate bench` run
profile() {
    local name=$1 count=$2
    shift 2
    timeout 150 "$ncu" --csv --page raw --metrics gpu__time_duration.sum \
        --kernel-name regex:'prep|tile|identity|commit' --launch-count "$count" \
        "$build/.libs/ssmstate" bench "$@" --quiet --samples 1 --warmup 1 --accepted 3 \
        --layers 1 --batches 256 --state f32 >"$out/$name.csv" 2>&1
    python3 - "$out/$name.csv" "$name" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
heads = [i for i, r in enumerate(rows) if r[0] == 'ID']
if not heads:
    print('==', sys.argv[2], ': no kernel rows (see', sys.argv[1], ')')
    sys.exit(0)
h = rows[heads[0]]
name_at, time_at = h.index('Kernel Name'), h.index('gpu__time_duration.sum')
kernels, steps = collections.OrderedDict(), []
for r in rows[heads[0] + 2:]:
    try:
        t = float(r[time_at].replace(',', '')) / 1000
    except ValueError:
        continue
    name = r[name_at].split('(')[0].replace('void ', '')
    kernels.setdefault(name, []).append(t)
    if not name.startswith(('prep', 'commit')):
        steps.append(t)
print('==', sys.argv[2], '(µs)')
for name, times in kernels.items():
    s = sorted(times)
    print('  %-44s n=%3d median=%8.1f max=%8.1f mean=%8.1f'
          % (name[:44], len(s), s[len(s) // 2], s[-1], sum(s) / len(s)))
if sys.argv[2].startswith('replay'):
    print('  step kernel, step by step:', ' '.join('%.0f' % t for t in steps[:16]))
PY
}
profile native 40 examples/qwen3-next.ini --modes native
profile replay_exact 96 examples/qwen3-next.ini --modes replay
profile replay_identity 96 bench/configs/qwen3-next-identity.ini --modes replay

# One MTP round's kernels (NVTX range "round a=3" of `ssmstate bench`), with
# ncu's sections on where warps wait: the multi-token path of compact's
# verify and commit, and native's verify. Full reports to $out/round_*.txt.
profile_round() {
    local name=$1
    shift
    timeout 200 "$ncu" --nvtx --nvtx-include "round a=3/" \
        --kernel-name regex:'tile|identity' --launch-count 3 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section Occupancy --section LaunchStats \
        "$build/.libs/ssmstate" bench "$@" --quiet --samples 1 --warmup 1 --accepted 3 \
        --layers 1 --batches 256 --state f32 >"$out/round_$name.txt" 2>&1
    echo "== round a=3, $name: $out/round_$name.txt"
    grep -E "tile_kernel|identity_kernel|Duration|Memory Throughput|Warp Cycles Per Issued|Stall|Achieved Occupancy" \
        "$out/round_$name.txt" | head -40
}
if [ "${PROFILE_ROUNDS:-1}" = 1 ]; then
    profile_round compact examples/qwen3-next.ini --modes compact
    profile_round native examples/qwen3-next.ini --modes native
fi
