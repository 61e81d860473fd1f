#!/bin/sh
# `ssmstate inspect` on pages written by tests/make_page.py, an implementation
# of docs/pages.md independent of core/page.c (TAP): a valid page is read
# field by field (exit 0); a flipped payload byte, a flipped header byte,
# another format version and a truncated page each give one error line
# naming the fault (exit 1); a missing file is bad usage (exit 2).
set -u
ssmstate="$SSM_TOP_BUILDDIR/ssmstate"
maker="$(dirname "$0")/make_page.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=
for candidate in ${PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1; then
        python=$candidate
        break
    fi
done
echo "1..6"
if [ -z "$python" ]; then
    for i in 1 2 3 4 5 6; do echo "ok $i # SKIP python3 not found"; done
    exit 0
fi

n=0
fails=0
check() { # name, expected exit, expected text, spoil
    name=$1 want_rc=$2 want=$3 spoil=$4
    n=$((n + 1))
    "$python" "$maker" "$tmp/$spoil.page" "$spoil"
    "$ssmstate" inspect "$tmp/$spoil.page" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq "$want_rc" ] && grep -qF -- "$want" "$tmp/out" "$tmp/err"; then
        echo "ok $n - $name"
    else
        echo "not ok $n - $name (exit $rc)"
        sed 's/^/# /' "$tmp/out" "$tmp/err"
        fails=$((fails + 1))
    fi
}
check "a valid page" 0 "gdn, layers 2, H 1, HV 2, K 8, V 8, W 4" none
check "a flipped payload byte" 1 "payload checksum mismatch" payload
check "a flipped header byte" 1 "header checksum mismatch" header
check "another format version" 1 "format version 2; ssmstate" version
check "a truncated page" 1 "truncated page" truncated
n=$((n + 1))
"$ssmstate" inspect "$tmp/none.missing" >/dev/null 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -qF "cannot open" "$tmp/err"; then
    echo "ok $n - a missing file"
else
    echo "not ok $n - a missing file (exit $rc)"
    fails=$((fails + 1))
fi
[ "$fails" -eq 0 ]
