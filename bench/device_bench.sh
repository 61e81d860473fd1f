#!/usr/bin/env bash
# The benchmark run on the lent H200, in one call: build the release tarball
# (tests/gpu/device_check.sh, build only, unless it already ran), time
# fla-core's recurrent kernels
# (bench/fla_bench.py; skipped when .device/fla_bench.json holds an earlier
# run's timings), then `ssmstate bench` on Qwen3-Next and Kimi-Linear: one
# layer at every batch size and the 36/20-layer chain at B 1 and 256, every
# mode with replay's default exact outputs, and replay again with identity
# outputs (fp32 state). Tables and JSON go to $OUT; the tables are printed
# last. Expects .device/ as device_check.sh does, plus the fla-core wheel in
# .device/wheels.
set -uo pipefail
root=$PWD
out=${OUT:-$root/.device/out}
mkdir -p "$out"
# A build left by tests/gpu/device_check.sh in this call's checkout is used as is.
if ! ls "$root"/.device/build/ssmstate-*/ssmstate >/dev/null 2>&1; then
    SSM_DEVICE_BUILD_ONLY=1 bash tests/gpu/device_check.sh >"$out/device_build.txt" 2>&1 ||
        { tail -30 "$out/device_build.txt"; exit 1; }
fi
build=$(echo "$root"/.device/build/ssmstate-*/)
lib=$root/.device/sysroot/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$lib" SSMSTATE_PLUGIN_PATH="$build/.libs"

fla=$root/.device/fla_bench.json
if [ ! -s "$fla" ]; then
    fla=$out/fla_bench.json
    timeout 240 python3 bench/fla_bench.py --out "$fla" >"$out/fla_bench.txt" 2>&1
    echo "fla_bench: exit $?"
fi
cp "$fla" "$out/fla_bench.json" 2>/dev/null

models=(examples/qwen3-next.ini examples/kimi-linear.ini)
identity=(bench/configs/qwen3-next-identity.ini bench/configs/kimi-linear-identity.ini)
# name, time limit, then the arguments of one `ssmstate bench` run
run() {
    local name=$1 limit=$2
    shift 2
    timeout "$limit" "$build/ssmstate" bench "$@" --fla "$fla" --json "$out/$name.json" \
        >"$out/$name.txt" 2>&1
    echo "$name: exit $?"
}
run f32_layer 140 "${models[@]}" --state f32 --layers 1 --samples 10
run f32_layer_identity 70 "${identity[@]}" --state f32 --layers 1 --modes native,replay --samples 10
run f32_chain 120 examples/qwen3-next.ini --state f32 --layers chain --batches 1,256 --samples 3
run f32_chain_identity 50 bench/configs/qwen3-next-identity.ini --state f32 --layers chain \
    --batches 1,256 --modes replay --samples 3
run bf16_layer 80 "${models[@]}" --state bf16 --layers 1 --batches 1,32,256 --samples 5
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$out/gpu_state.txt"
for f in f32_layer f32_layer_identity f32_chain f32_chain_identity bf16_layer; do
    grep -vE "^bench: " "$out/$f.txt" | grep -E "^ *(decode|round a=3|copy)|ratio|^#|^==|gdn|kda" |
        grep -E " (1|256) |ratio|^==" | head -40
done
