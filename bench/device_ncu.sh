#!/usr/bin/env bash
# ncu's view of the decode kernels that miss their targets, over what
# bench/device_stage.sh staged (carry .device/stage, or SSM_STAGE names
# another staged build): native decode at B = 256 and 64 (prologue and tile
# job), replay's decode (prologue and identity kernel) at B = 256, both
# again as one-launch steps (native's at B = 1 too), and replay's decode
# launch by launch over a fold period. Per kernel: duration, DRAM throughput,
# occupancy, registers, issue activity and the top warp stalls; then the
# prologue's SASS with per-line counts (prep_sass.csv) and the one-launch
# step kernel's at B = 1 (step1_sass.csv), and replay's kernels at B = 1.
# Full CSV under $OUT_NCU (else $OUT)/ncu_*.csv. About three minutes.
set -u
root=$PWD S=${SSM_STAGE:-$root/.device/stage} O=${OUT_NCU:-${OUT:-$root/.device/out}}
mkdir -p "$O"
export LD_LIBRARY_PATH=$S/lib SSMSTATE_PLUGIN_PATH=$S/lib
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,\
sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,\
launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__grid_size,\
sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,\
smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,\
smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,\
smsp__average_warp_latency_issue_stalled_wait.ratio,\
smsp__average_warp_latency_issue_stalled_barrier.ratio,\
smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,\
smsp__average_warp_latency_issue_stalled_drain.ratio,\
smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,\
smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,\
lts__t_sectors_srcunit_tex_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum
probe() { # NAME ONE_LAUNCH MODE B REGEX COUNT
    SSMSTATE_CUDA_ONE_LAUNCH=$2 timeout 60 "$ncu" --csv --page raw --metrics "$metrics" \
        --kernel-name regex:"$5" --launch-count "$6" \
        "$S/bin/ssmstate" bench examples/qwen3-next.ini --modes "$3" --batches "$4" \
        --state f32 --layers 1 --accepted 1 --samples 1 --warmup 1 --quiet \
        >"$O/ncu_$1.csv" 2>&1
    python3 - "$O/ncu_$1.csv" "$1" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
heads = [i for i, r in enumerate(rows) if r[0] == 'ID']
if not heads:
    print('==', sys.argv[2], 'no rows'); sys.exit(0)
h = rows[heads[0]]
for r in rows[heads[0] + 2:]:
    d = dict(zip(h, r))
    g = lambda k: d.get(k, '?')
    stalls = {k.split('stalled_')[1].split('.')[0]: g(k) for k in h if 'stalled_' in k}
    print('== %s %s: %s us, dram %s%%, warps %s%%, regs %s, lim reg/smem %s/%s, grid %s, issue %s%%, inst %s, rd %s wr %s'
          % (sys.argv[2], g('Kernel Name').split('(')[0][-28:], g('gpu__time_duration.sum'),
             g('dram__throughput.avg.pct_of_peak_sustained_elapsed'),
             g('sm__warps_active.avg.pct_of_peak_sustained_active'),
             g('launch__registers_per_thread'), g('launch__occupancy_limit_registers'),
             g('launch__occupancy_limit_shared_mem'), g('launch__grid_size'),
             g('sm__inst_issued.avg.pct_of_peak_sustained_active'), g('smsp__inst_executed.sum'),
             g('dram__bytes_read.sum'), g('dram__bytes_write.sum')))
    print('   stalls', ' '.join('%s=%s' % kv for kv in stalls.items()))
PY
}
probe native256 0 native 256 'prep|tile_kernel' 2
probe replay256 0 replay 256 'prep|identity|tile_kernel' 2
probe step256 1 native 256 'step_kernel' 1
probe step1 1 native 1 'step_kernel' 1
probe replay256_one 1 replay 256 'prep|identity|commit' 3
probe replay1 1 replay 1 'prep|identity|tile' 3
# Replay's decode at B = 256 launch by launch over more than a fold period
# (the bench's sample is one period, about 13 steps at L = 16): what the
# prologue and the commit take beside the identity kernel, and the step
# whose rows fold (its identity kernel also folds) against the others.
probe replay256_period 0 replay 256 'prep|identity|commit' 42

# The prologue instruction by instruction: its SASS with the executed
# instructions and stalls of each line (native decode, B = 256).
if timeout 90 "$ncu" --section SourceCounters -f -o "$O/prep" --kernel-name regex:prep_kernel \
    --launch-count 1 "$S/bin/ssmstate" bench examples/qwen3-next.ini --modes native --batches 256 \
    --state f32 --layers 1 --accepted 1 --samples 1 --warmup 1 --quiet >/dev/null 2>&1; then
    "$ncu" -i "$O/prep.ncu-rep" --page source --csv --print-source sass >"$O/prep_sass.csv" 2>&1
    echo "== prep SASS: $(wc -l <"$O/prep_sass.csv") lines in prep_sass.csv"
    rm -f "$O/prep.ncu-rep"
fi

# The one-launch decode at B = 1, the latency-bound case: its SASS with the
# executed instructions and stalls of each line.
if timeout 90 "$ncu" --section SourceCounters --section WarpStateStats -f -o "$O/step1" \
    --kernel-name regex:step_kernel --launch-count 1 "$S/bin/ssmstate" bench \
    examples/qwen3-next.ini --modes native --batches 1 --state f32 --layers 1 --accepted 1 \
    --samples 1 --warmup 1 --quiet >/dev/null 2>&1; then
    "$ncu" -i "$O/step1.ncu-rep" --page source --csv --print-source sass >"$O/step1_sass.csv" 2>&1
    "$ncu" -i "$O/step1.ncu-rep" --page details >"$O/step1_details.txt" 2>&1
    echo "== step kernel at B = 1: $(wc -l <"$O/step1_sass.csv") lines in step1_sass.csv"
    rm -f "$O/step1.ncu-rep"
fi
