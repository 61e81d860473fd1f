#!/bin/sh
# The figures of `ssmstate serve` (TAP): a tiny serve on the CPU (every mode,
# both state dtypes) writes --json, and bench/plot_serve.py draws it: a PNG
# (the signature; 1280 x 420 pixels, a 640 x 420 chart per state dtype side
# by side) and with --svg an SVG; the same input gives the same PNG bytes;
# two inputs with -o give one figure of both (a row each); a JSON that is not
# serve's, and a python3 without matplotlib, exit 2 with one line on stderr
# and write nothing.
#
# Reports SKIP ("1..0 # SKIP", the TAP driver's form of exit 77) when no
# python3 can import matplotlib (Debian: python3-matplotlib), which only the
# figures need. Set PYTHON to choose the interpreter. make check sets
# SSM_TOP_SRCDIR, SSM_TOP_BUILDDIR and SSMSTATE_PLUGIN_PATH; run by hand from
# a build directory, the defaults below find everything.
set -u
top_srcdir=${SSM_TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
top_builddir=${SSM_TOP_BUILDDIR:-$(pwd)}
: "${SSMSTATE_PLUGIN_PATH:=$top_builddir/.libs}"
export SSMSTATE_PLUGIN_PATH
ssmstate="$top_builddir/ssmstate"
script="$top_srcdir/bench/plot_serve.py"

python=
for candidate in ${PYTHON:-} python3 /usr/bin/python3; do
    if "$candidate" -c 'import matplotlib' >/dev/null 2>&1; then
        python=$candidate
        break
    fi
done
if [ -z "$python" ]; then
    echo "1..0 # SKIP python3 cannot import matplotlib (Debian: python3-matplotlib)"
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# matplotlib's font cache and settings in the test's own folder: no warning
# about an unwritable home, nothing left behind.
MPLCONFIGDIR="$tmp/mpl"
export MPLCONFIGDIR
n=0
fails=0
report() { # status, name
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        fails=$((fails + 1))
        sed 's/^/# /' "$tmp/err" 2>/dev/null | tail -n 20
    fi
}
# The first 8 bytes of a file in hex, one string.
head_hex() { od -An -tx1 -N8 "$1" | tr -d ' \n'; }
# A PNG's width and height (IHDR, bytes 16..23), as "W H".
png_size() {
    od -An -tu1 -j16 -N8 "$1" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4,
                                             $5 * 16777216 + $6 * 65536 + $7 * 256 + $8 }'
}
signature=89504e470d0a1a0a

echo "1..7"
# The smoke test's tiny model with 16-wide heads, a small budget and few
# steps: a sweep of every mode and both dtypes in well under a second.
config="$tmp/serve-tiny.ini"
sed -e 's/^key_dim = 32/key_dim = 16/' -e 's/^value_dim = 32/value_dim = 16/' \
    "$top_srcdir/examples/serve-tiny.ini" >"$config"
tiny="--device cpu --modes all --state f32,bf16 --state-budget 256K --steps 4 --warmup-steps 8
      --prompt 4:16 --output 4:8 --chunk 32 --check 0 --quiet"
# shellcheck disable=SC2086 # $tiny is several words on purpose
"$ssmstate" serve "$config" $tiny --seed 5 --json "$tmp/run.json" >"$tmp/out" 2>"$tmp/err" &&
    "$ssmstate" serve "$config" $tiny --seed 6 --json "$tmp/other.json" \
        >>"$tmp/out" 2>>"$tmp/err" &&
    grep -q '"command":"serve"' "$tmp/run.json"
report $? "serve --json on the CPU"

mkdir "$tmp/figs"
"$python" "$script" "$tmp/run.json" --svg --out-dir "$tmp/figs" >"$tmp/out" 2>"$tmp/err" &&
    [ -s "$tmp/figs/run.png" ] && [ "$(head_hex "$tmp/figs/run.png")" = "$signature" ] &&
    grep -qx "$tmp/figs/run.png" "$tmp/out"
report $? "plot_serve.py writes a PNG (the PNG signature)"

[ "$(png_size "$tmp/figs/run.png")" = "1280 420" ] ||
    echo "run.png is $(png_size "$tmp/figs/run.png"), not 1280 420" >"$tmp/err"
report $? "a 640 x 420 chart per state dtype, side by side"

head -c 200 "$tmp/figs/run.svg" 2>/dev/null | grep -q "<svg" &&
    grep -q "native" "$tmp/figs/run.svg" && grep -q "replay" "$tmp/figs/run.svg"
report $? "--svg writes the SVG beside it, a legend entry per mode"

"$python" "$script" "$tmp/run.json" "$tmp/other.json" -o "$tmp/both.png" >"$tmp/out" 2>"$tmp/err" &&
    [ "$(head_hex "$tmp/both.png")" = "$signature" ] &&
    [ "$(png_size "$tmp/both.png")" = "1280 840" ] &&
    "$python" "$script" "$tmp/run.json" -o "$tmp/again.png" >"$tmp/out" 2>"$tmp/err" &&
    cmp "$tmp/figs/run.png" "$tmp/again.png" >"$tmp/err" 2>&1
report $? "-o draws two runs in one figure; the same input gives the same PNG"

# Not serve's JSON: bench's, and not JSON at all.
echo '{"command":"bench","tables":[]}' >"$tmp/bench.json"
echo 'serve' >"$tmp/text.json"
bad=0
for f in bench text; do
    "$python" "$script" "$tmp/$f.json" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] ||
        ! grep -q "not the JSON of .ssmstate serve --json." "$tmp/err" || [ -e "$tmp/$f.png" ]; then
        echo "$f.json: exit $rc, $(wc -l <"$tmp/err") stderr lines: $(head -n 3 "$tmp/err")" \
            >>"$tmp/bad"
        bad=1
    fi
done
[ "$bad" -eq 0 ] || mv "$tmp/bad" "$tmp/err"
report "$bad" "a JSON that is not serve's exits 2 with one line, writing nothing"

# A python3 without matplotlib: a module of that name that fails to import,
# found first on PYTHONPATH.
mkdir -p "$tmp/nompl/matplotlib"
echo 'raise ImportError("No module named matplotlib")' >"$tmp/nompl/matplotlib/__init__.py"
rm -f "$tmp/figs/run.png"
PYTHONPATH="$tmp/nompl" "$python" "$script" "$tmp/run.json" --out-dir "$tmp/figs" \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "python3-matplotlib" "$tmp/err" &&
    [ ! -e "$tmp/figs/run.png" ]
report $? "without matplotlib: exit 2 and one line naming python3-matplotlib (exit $rc)"
[ "$fails" -eq 0 ]
