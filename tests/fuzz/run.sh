#!/bin/sh
# Runs every harness that build.sh built (`make fuzz-run`) for SECONDS each,
# over its committed corpus and regressions; new inputs go to a scratch
# corpus in OUTDIR/corpus/<harness>, never into the source tree. Exits 1 if
# any harness found a crash, a leak or a broken invariant: the input is then
# OUTDIR/artifacts/<harness>-crash-* (keep it under
# tests/fuzz/regressions/<harness>/ once fixed). Usage: run.sh SRCDIR OUTDIR SECONDS.
set -u
src=$1 out=$2 seconds=$3
fails=0
mkdir -p "$out/artifacts"
for h in config page step; do
    case $h in
    config) extra="-dict=$src/tests/fuzz/config.dict -max_len=4096" ;;
    page) extra="-max_len=8192" ;;
    *) extra="-max_len=512" ;;
    esac
    mkdir -p "$out/corpus/$h"
    dirs="$out/corpus/$h $src/tests/fuzz/corpus/$h"
    [ -d "$src/tests/fuzz/regressions/$h" ] && dirs="$dirs $src/tests/fuzz/regressions/$h"
    echo "fuzz_$h: ${seconds}s"
    # shellcheck disable=SC2086
    if "$out/fuzz_$h" -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$out/artifacts/$h-" $extra $dirs >"$out/$h.log" 2>&1; then
        grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|cov: ' "$out/$h.log" |
            tail -n 3 | sed "s/^/  /"
    else
        fails=$((fails + 1))
        echo "fuzz_$h FAILED; the log is $out/$h.log:"
        grep -E 'ERROR|invariant failed|SUMMARY|Test unit written' "$out/$h.log" | sed 's/^/  /'
    fi
done
[ "$fails" -eq 0 ]
