#!/usr/bin/env bash
# Staged builds timed side by side in one device call (bench/device_stage.sh
# stages a build; a copy of its lib/ and bin/ssmstate is enough here):
#     bash bench/device_compare.sh main=.device/stage next=.device/next
# `ssmstate bench` of every build over the same configs, the builds taking
# turns for SSM_COMPARE_REPS rounds (2), then bench/compare_runs.py's table:
# each build's medians and its ratio to the first build's. SSM_COMPARE_CONFIGS
# (examples/qwen3-next.ini examples/kimi-linear.ini) and SSM_COMPARE_ARGS
# (fp32 state, one layer, B = 1, 64, 256, a=3) choose what is timed. Tables
# and JSON under $OUT/compare (else .device/out/compare). About 3 s a bench.
set -u
O=${OUT:-$PWD/.device/out}/compare
mkdir -p "$O"
configs=${SSM_COMPARE_CONFIGS:-examples/qwen3-next.ini examples/kimi-linear.ini}
args=${SSM_COMPARE_ARGS:---state f32 --layers 1 --batches 1,64,256 --accepted 3 --samples 10}
declare -A files
for rep in $(seq 1 "${SSM_COMPARE_REPS:-2}"); do
    for build in "$@"; do
        name=${build%%=*} dir=${build#*=}
        out=$O/${name}_$rep
        LD_LIBRARY_PATH=$dir/lib SSMSTATE_PLUGIN_PATH=$dir/lib timeout 120 "$dir/bin/ssmstate" \
            bench $configs $args --json "$out.json" --quiet >"$out.txt" 2>&1
        echo "bench $name, round $rep: exit $?"
        files[$name]=${files[$name]:+${files[$name]},}$out.json
    done
done
python3 "$(dirname "$0")/compare_runs.py" $(for build in "$@"; do
    name=${build%%=*}
    echo "$name=${files[$name]}"
done) | tee "$O/table.md"
