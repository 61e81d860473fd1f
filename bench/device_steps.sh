#!/usr/bin/env bash
# The step kernels' device run, in three calls of at most ten minutes each on
# one warm machine (the build stays in .device/build between them):
#
#   bash bench/device_steps.sh test    build the release tarball, run the whole
#                                      suite (the GPU mode tests with each choice
#                                      of one-launch steps and the fast math)
#   bash bench/device_steps.sh bench   ssmstate bench with the default one-launch
#                                      choice, with every step in one launch, with
#                                      none (SSMSTATE_CUDA_ONE_LAUNCH unset, 1, 0),
#                                      and fla-core's recurrent kernels in the
#                                      same call
#   bash bench/device_steps.sh peers   the public ReplaySSM and fla kernels
#                                      (.device/peers, .device/replayssm)
#
# The first call carries .device/ (release tarball, Debian packages and the
# fla-core wheel as docs/bench.md lists them; peers/ holds the peer scripts and
# replayssm/ the ReplaySSM kernels laid out by peers/setup_replayssm.sh). Logs
# and JSON go to $OUT; a short table is printed last.
set -uo pipefail
root=$PWD
out=${OUT:-$root/.device/out}
mkdir -p "$out"
stage=${1:-test}
lib=$root/.device/sysroot/usr/lib/x86_64-linux-gnu
build() { echo "$root"/.device/build/ssmstate-*/; }

case "$stage" in
test)
    timeout 560 bash tests/gpu/device_check.sh >"$out/suite.txt" 2>&1
    echo "suite: exit $?"
    grep -E "^# (TOTAL|PASS|SKIP|FAIL|ERROR)|^(FAIL|ERROR): " "$out/suite.txt" | head -20
    grep -hE "^(not ok|FAIL)" "$out"/gpu_modes*.log 2>/dev/null | head -20
    ;;
bench)
    b=$(build)
    export LD_LIBRARY_PATH="$lib" SSMSTATE_PLUGIN_PATH="$b/.libs"
    fla=$out/fla_bench.json
    timeout 200 python3 bench/fla_bench.py --out "$fla" >"$out/fla_bench.txt" 2>&1
    echo "fla_bench: exit $?"
    # variants: the default choice of one-launch steps, all, none
    for v in default 1 0; do
        unset SSMSTATE_CUDA_ONE_LAUNCH
        [ "$v" = default ] || export SSMSTATE_CUDA_ONE_LAUNCH=$v
        timeout 120 "$b/ssmstate" bench examples/qwen3-next.ini examples/kimi-linear.ini \
            --state f32 --layers 1 --batches 1,64,128,256 --accepted 3 --samples 10 \
            --fla "$fla" --json "$out/layer_$v.json" --quiet >"$out/layer_$v.txt" 2>&1
        echo "layer $v: exit $?"
        timeout 60 "$b/ssmstate" bench examples/qwen3-next.ini --state f32 --layers chain \
            --batches 1,256 --accepted 3 --samples 3 --json "$out/chain_$v.json" --quiet \
            >"$out/chain_$v.txt" 2>&1
        echo "chain $v: exit $?"
    done
    for v in default 1 0; do
        echo "== one-launch $v"
        grep -E "^==|^ *(decode|round a=3|copy) " "$out/layer_$v.txt" | head -40
    done
    ;;
peers)
    fla_dir=/tmp/fla_pkg
    mkdir -p "$fla_dir" && python3 -m zipfile -e .device/wheels/fla_core-*.whl "$fla_dir"
    PYTHONUNBUFFERED=1 timeout 540 python3 .device/peers/anchor_replayssm.py \
        --replayssm-path .device/replayssm --fla-path "$fla_dir" --groups copy,decode,spec \
        --batches 256,128,64,1 --spec-T 4 --time-budget 480 --json "$out/replayssm.json" \
        >"$out/replayssm.txt" 2>&1
    echo "replayssm: exit $?"
    tail -40 "$out/replayssm.txt"
    ;;
*)
    echo "usage: $0 test|bench|peers" >&2
    exit 2
    ;;
esac
