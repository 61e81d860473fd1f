#!/usr/bin/env bash
# One device call over what bench/device_stage.sh built on the host (carry
# .device/stage, and .device/wheels for fla-core): the GPU mode suite by
# default, in one launch, and in two launches with the other choice of
# every knob (replay's folds in a fold job, one tile staged ahead);
# `ssmstate run --device cuda`; ssmstate bench by default and with each
# knob turned; the chunk kernels' test and timings
# beside fla-core's prefill; the Python binding's GPU tests and examples; ncu on the
# decode kernels (bench/device_ncu.sh); the public ReplaySSM kernels (carry
# .device/replayssm and .device/peers); and fla-core's kernels beside the
# binding (vs_fla.py). A short table last; every log in $OUT/logs.tgz (a
# device call brings back at most 8 files). Steps past 570 s are skipped
# (a call's limit is 600 s).
set -u
root=$PWD S=${SSM_STAGE:-$root/.device/stage} O=${SSM_DEVICE_LOGS:-/tmp/ssm_out}
mkdir -p "$O"
export LD_LIBRARY_PATH=$S/lib SSMSTATE_PLUGIN_PATH=$S/lib SSM_TOP_SRCDIR=$root
t0=$(date +%s)
elapsed() { echo "[$(($(date +%s) - t0)) s]"; }
# Whether there is time for a step that may take $1 seconds (the call's
# limit is 600 s; SSM_DEVICE_BUDGET overrides the 570 kept for steps).
time_for() { [ $(($(date +%s) - t0 + $1)) -le "${SSM_DEVICE_BUDGET:-570}" ] || { echo "skipped: no time left $(elapsed)"; false; }; }
# Whether step $1 is among SSM_DEVICE_STEPS (a space-separated list of
# modes, forced, tests (the other GPU test programs), run, bench, knobs
# (bench with the other knobs turned), chunk, prefill (the library's
# prefill per mode, bench/prefill_modes.py), python, unit, ncu, peer, fla;
# all when unset), so
# one plan can be split over two calls.
wanted() { case " ${SSM_DEVICE_STEPS:-modes forced tests run bench knobs chunk prefill python unit ncu peer fla} " in *" $1 "*) ;; *) false ;; esac; }
pack() { [ -n "${OUT:-}" ] && tar czf "$OUT/logs.tgz" -C "$O" . 2>/dev/null; }
trap pack EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$O/gpu.txt"
modes() { # NAME [VAR=VALUE...]
    local name=$1
    shift
    env "$@" timeout 200 "$S/bin/check_gpu_modes" >"$O/modes_$name.log" 2>&1
    echo "modes $name: exit $? ok $(grep -c '^ok' "$O/modes_$name.log")" \
        "not ok $(grep -c '^not ok' "$O/modes_$name.log") $(elapsed)"
    grep '^not ok' "$O/modes_$name.log" | head -8
}
wanted modes && modes default
if wanted tests; then
    for t in cuda_math pages_cuda pages_device tuning_cuda conform_cuda; do
        time_for 60 || break
        SSM_TOP_BUILDDIR=$S/bin timeout 180 sh "tests/gpu/$t.gpu" >"$O/$t.log" 2>&1
        echo "$t: exit $? ok $(grep -c '^ok' "$O/$t.log") not ok $(grep -c '^not ok' "$O/$t.log") $(elapsed)"
        grep '^not ok' "$O/$t.log" | head -5
    done
fi
if wanted run; then
    SSM_TOP_BUILDDIR=$S/bin timeout 150 sh tests/gpu/run_cuda.gpu >"$O/run_cuda.log" 2>&1
    echo "run --device cuda: exit $? $(elapsed)"
    grep -E "^(not ok|1\.\.)" "$O/run_cuda.log" | head -5
fi
bench() { # NAME CONFIGS [VAR=VALUE...]
    local name=$1 configs=$2
    shift 2
    env "$@" timeout 80 "$S/bin/ssmstate" bench $configs --state f32 --layers 1 \
        --batches 1,64,256 --accepted 3 --samples 10 --json "$O/layer_$name.json" --quiet \
        >"$O/layer_$name.txt" 2>&1
    echo "bench $name: exit $? $(elapsed)"
}
wanted bench && time_for 50 && bench default "examples/qwen3-next.ini examples/kimi-linear.ini"
wanted bench && time_for 25 && bench one_launch "examples/qwen3-next.ini examples/kimi-linear.ini" \
    SSMSTATE_CUDA_ONE_LAUNCH=1
wanted knobs && time_for 25 && bench stages2 examples/qwen3-next.ini SSMSTATE_CUDA_DECODE_STAGES=2
wanted knobs && time_for 25 && bench fold_job examples/qwen3-next.ini SSMSTATE_CUDA_REPLAY_FOLD=job
wanted knobs && time_for 25 && bench commit_self "examples/qwen3-next.ini examples/kimi-linear.ini" \
    SSMSTATE_CUDA_REPLAY_COMMIT=self
wanted knobs && time_for 25 && bench prep_rows4 "examples/qwen3-next.ini examples/kimi-linear.ini" \
    SSMSTATE_CUDA_PREP_ROWS=4
wanted knobs && time_for 25 && bench fold_early "examples/qwen3-next.ini examples/kimi-linear.ini" \
    SSMSTATE_CUDA_REPLAY_FOLD=early
wanted knobs && time_for 25 && bench fold_plain "examples/qwen3-next.ini examples/kimi-linear.ini" \
    SSMSTATE_CUDA_REPLAY_FOLD_LOADS=plain
# Candidates under measurement: SSM_DEVICE_BENCH_VARIANTS and
# SSM_DEVICE_MODES_VARIANTS hold space-separated NAME:VAR=VALUE,VAR=VALUE.
for spec in ${SSM_DEVICE_BENCH_VARIANTS:-}; do
    time_for 25 && bench "${spec%%:*}" "examples/qwen3-next.ini examples/kimi-linear.ini" \
        $(echo "${spec#*:}" | tr , ' ')
done
for spec in ${SSM_DEVICE_MODES_VARIANTS:-}; do
    time_for 150 && modes "${spec%%:*}" $(echo "${spec#*:}" | tr , ' ')
done
if wanted chunk && time_for 60; then
    timeout 150 "$S/bin/check_chunk_cuda" >"$O/chunk_cuda.log" 2>&1
    echo "check_chunk_cuda: exit $? ok $(grep -c '^ok' "$O/chunk_cuda.log")" \
        "not ok $(grep -c '^not ok' "$O/chunk_cuda.log") $(elapsed)"
    grep '^not ok' "$O/chunk_cuda.log" | head -8
    time_for 40 && timeout 90 "$S/bin/bench_chunk" >"$O/bench_chunk.txt" 2>&1
    echo "bench_chunk: exit $? $(elapsed)"
    time_for 40 && SSM_BENCH_SCAN=single timeout 90 "$S/bin/bench_chunk" \
        >"$O/bench_chunk_single.txt" 2>&1
    echo "bench_chunk, scan with one record's room: exit $? $(elapsed)"
fi
wanted forced && time_for 150 && modes one_launch SSMSTATE_CUDA_ONE_LAUNCH=1
wanted forced && time_for 150 && modes two_launch SSMSTATE_CUDA_ONE_LAUNCH=0 \
    SSMSTATE_CUDA_REPLAY_FOLD=job SSMSTATE_CUDA_DECODE_STAGES=2
wanted forced && time_for 150 && modes exact_math SSMSTATE_CUDA_ONE_LAUNCH=1 SSMSTATE_CUDA_FAST_MATH=0
wanted forced && time_for 150 && modes replay_commit SSMSTATE_CUDA_REPLAY_COMMIT=self \
    SSMSTATE_CUDA_PREP_ROWS=4 SSMSTATE_CUDA_REPLAY_FOLD=early SSMSTATE_CUDA_REPLAY_FOLD_LOADS=plain
ls .device/wheels/fla_core-*.whl >/dev/null 2>&1 &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
        .device/wheels/fla_core-*.whl
export PYTHONPATH=/tmp/site:$root/python PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export SSMSTATE_LIBRARY=$S/lib/libssmstate.so.0
if wanted python && time_for 20; then
    timeout 70 python3 -m pytest -p no:cacheprovider -q tests/python/test_gpu.py \
        >"$O/pytest_gpu.txt" 2>&1
    echo "pytest gpu: exit $? $(elapsed)"
    tail -2 "$O/pytest_gpu.txt"
fi
if wanted prefill && time_for 60; then
    timeout 180 python3 bench/prefill_modes.py --modes native,compact,replay --slots 8,256 \
        --precision high,fast \
        --reps 10 >"$O/prefill_modes.txt" 2>&1
    echo "prefill_modes.py: exit $? $(elapsed)"
fi
if wanted python && time_for 15; then
    timeout 60 python3 examples/python/decode_loop.py --device cuda >"$O/decode_loop.txt" 2>&1
    echo "decode_loop.py: exit $? $(elapsed)"
    tail -3 "$O/decode_loop.txt"
fi
if wanted unit && time_for 20; then
    timeout 60 "$S/bin/bench_decode_unit" 1 64 256 >"$O/decode_unit.txt" 2>&1
    echo "bench_decode_unit: exit $? $(elapsed)"
    cat "$O/decode_unit.txt"
fi
wanted ncu && time_for 60 && OUT_NCU=$O bash bench/device_ncu.sh && echo "ncu: $(elapsed)"
if wanted peer && time_for 60 && [ -d .device/replayssm ] && [ -f .device/peers/anchor_replayssm.py ]; then
    python3 -m zipfile -e .device/wheels/fla_core-*.whl /tmp/fla_src
    timeout 90 python3 .device/peers/anchor_replayssm.py --replayssm-path .device/replayssm \
        --fla-path /tmp/fla_src --groups copy,decode,spec --batches 256,64 --fill 0,8 \
        --spec-T 4 --no-check --time-budget 45 >"$O/replayssm.txt" 2>&1
    echo "ReplaySSM peer: exit $? $(elapsed)"
fi
if wanted chunk && time_for 60; then
    timeout 90 python3 bench/fla_prefill.py --reps 10 >"$O/fla_prefill.txt" 2>&1
    echo "fla_prefill.py: exit $? $(elapsed)"
fi
if wanted fla && time_for 60; then
    timeout $((${SSM_DEVICE_BUDGET:-570} - $(date +%s) + t0)) python3 examples/python/vs_fla.py >"$O/vs_fla.txt" 2>&1
    echo "vs_fla.py: exit $? $(elapsed)"
    tail -14 "$O/vs_fla.txt"
fi
[ -f "$O/bench_chunk.txt" ] && cat "$O/bench_chunk.txt"
[ -f "$O/bench_chunk_single.txt" ] && echo "== scan with one record's room" &&
    grep -A2 "tc bf16 mma" "$O/bench_chunk_single.txt" | grep -v "^--"
[ -f "$O/fla_prefill.txt" ] && grep -E "gdn|kda" "$O/fla_prefill.txt" | head -8
[ -f "$O/prefill_modes.txt" ] && grep -E "gdn|kda" "$O/prefill_modes.txt" | head -96
for v in default one_launch stages2 fold_job commit_self prep_rows4 fold_early fold_plain $(for spec in ${SSM_DEVICE_BENCH_VARIANTS:-}; do echo "${spec%%:*}"; done); do
    [ -f "$O/layer_$v.txt" ] || continue
    echo "== $v"
    grep -E "^ *(decode|round a=3|copy) .* (native|compact|replay|copy) " "$O/layer_$v.txt" |
        grep -v memcpy | head -24
done
