#!/usr/bin/env bash
# One device call over what bench/device_stage.sh built on the host (carry
# .device/stage, and .device/wheels for fla-core): the GPU mode suite with
# each choice of one-launch steps, `ssmstate run --device cuda`, ssmstate bench with one launch forced off
# and on, the Python binding's GPU tests and examples, and fla-core's recurrent kernels.
# Logs under $OUT; a short table last. About 5 minutes on an H100.
set -u
root=$PWD S=$root/.device/stage O=${OUT:-$root/.device/out}
mkdir -p "$O"
export LD_LIBRARY_PATH=$S/lib SSMSTATE_PLUGIN_PATH=$S/lib SSM_TOP_SRCDIR=$root
t0=$(date +%s)
elapsed() { echo "[$(($(date +%s) - t0)) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$O/gpu.txt"
modes() { # NAME [VAR=VALUE...]
    local name=$1
    shift
    env "$@" timeout 110 "$S/bin/check_gpu_modes" >"$O/modes_$name.log" 2>&1
    echo "modes $name: exit $? ok $(grep -c '^ok' "$O/modes_$name.log")" \
        "not ok $(grep -c '^not ok' "$O/modes_$name.log") $(elapsed)"
    grep '^not ok' "$O/modes_$name.log" | head -8
}
modes default
SSM_TOP_BUILDDIR=$S/bin SSM_TOP_SRCDIR=$root timeout 100 sh tests/gpu/run_cuda.gpu \
    >"$O/run_cuda.log" 2>&1
echo "run --device cuda: exit $? $(elapsed)"
grep "^not ok" "$O/run_cuda.log" | head -5
for v in 0 1; do
    SSMSTATE_CUDA_ONE_LAUNCH=$v timeout 60 "$S/bin/ssmstate" bench examples/qwen3-next.ini \
        examples/kimi-linear.ini --state f32 --layers 1 --batches 1,64,256 --accepted 3 \
        --samples 10 --json "$O/layer_$v.json" --quiet >"$O/layer_$v.txt" 2>&1
    echo "bench one-launch=$v: exit $? $(elapsed)"
done
modes two_launch SSMSTATE_CUDA_ONE_LAUNCH=0
modes fast_math SSMSTATE_CUDA_ONE_LAUNCH=1 SSMSTATE_CUDA_FAST_MATH=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    .device/wheels/fla_core-*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export SSMSTATE_LIBRARY=$S/lib/libssmstate.so.0
timeout 70 python3 -m pytest -p no:cacheprovider -q tests/python/test_gpu.py \
    >"$O/pytest_gpu.txt" 2>&1
echo "pytest gpu: exit $? $(elapsed)"
tail -3 "$O/pytest_gpu.txt"
export SSMSTATE_PLUGIN_PATH=$S/lib PYTHONPATH=/tmp/site:$root/python
timeout 90 python3 examples/python/decode_loop.py --device cuda >"$O/decode_loop.txt" 2>&1
echo "decode_loop.py: exit $? $(elapsed)"
tail -4 "$O/decode_loop.txt"
timeout 90 python3 examples/python/vs_fla.py >"$O/vs_fla.txt" 2>&1
echo "vs_fla.py: exit $? $(elapsed)"
tail -12 "$O/vs_fla.txt"
timeout 90 python3 bench/fla_bench.py --quick --out "$O/fla.json" >"$O/fla.txt" 2>&1
echo "fla: exit $? $(elapsed)"
for v in 0 1; do
    echo "== one-launch $v"
    grep -E "^ *(decode|round a=3|copy) " "$O/layer_$v.txt" | head -24
done
grep -E "recurrent|cb_" "$O/fla.txt" | head -16
