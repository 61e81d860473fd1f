#!/bin/sh
# bench/compare_runs.py (TAP): two builds' `ssmstate bench --json` rows, two
# runs each, give one row per measurement with each run's median and the
# second build's mean over the first's; a row with an error or measured by
# one build only is left out; no argument, or one without files, is refused.
# Reports SKIP when there is no python3.
set -u
top_srcdir=${SSM_TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
py=${PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
    echo "1..0 # SKIP no python3"
    exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
row() { # FILE OP BATCH MODE ACCEPTED MEDIAN [ERROR]
    printf '{"model":"gdn","op":"%s","batch":%s,"mode":"%s","accepted":%s,"median_us":%s,"error":%s}\n' \
        "$2" "$3" "$4" "$5" "$6" "${7:-null}" >>"$1"
}
row "$dir/a1.json" decode 256 native null 400
row "$dir/a1.json" round 256 replay 3 500
row "$dir/a1.json" decode 1 native null 6 '"no device"'
row "$dir/a1.json" decode 64 compact null 100
row "$dir/a2.json" decode 256 native null 402
row "$dir/a2.json" round 256 replay 3 502
row "$dir/b1.json" decode 256 native null 300
row "$dir/b1.json" round 256 replay 3 1000
row "$dir/b2.json" decode 256 native null 302
row "$dir/b2.json" round 256 replay 3 1004
out=$("$py" "$top_srcdir/bench/compare_runs.py" main="$dir/a1.json,$dir/a2.json" \
    next="$dir/b1.json,$dir/b2.json")
echo "1..5"
n=1
check() { # DESCRIPTION COMMAND...
    d=$1
    shift
    if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; printf '%s\n' "$out" | sed 's/^/# /'; fi
    n=$((n + 1))
}
check "decode row: both runs and the ratio" \
    grep -qxF '| gdn | decode | 256 | native | 400.00 402.00 | 300.00 302.00 | 0.751 |' <<EOF2
$out
EOF2
check "round row names its accepted tokens" \
    grep -qxF '| gdn | round a=3 | 256 | replay | 500.00 502.00 | 1000.00 1004.00 | 2.000 |' <<EOF2
$out
EOF2
check "rows with errors or one build only are left out" \
    test "$(printf '%s\n' "$out" | grep -c '^| gdn')" -eq 2
check "no argument is refused" \
    sh -c '! "$1" "$2" >/dev/null 2>&1' sh "$py" "$top_srcdir/bench/compare_runs.py"
check "a build without files is refused" \
    sh -c '! "$1" "$2" main= >/dev/null 2>&1' sh "$py" "$top_srcdir/bench/compare_runs.py"
