#!/bin/sh
# `ssmstate inspect` on pages written by tests/make_page.py, an implementation
# of docs/pages.md independent of core/pages/page.c (TAP): a valid page is read
# field by field (exit 0); a flipped payload byte, a flipped header byte,
# another format version, a truncated page, bytes after the payload, a set
# reserved byte, a lower bound on a gdn model and value heads that are no
# multiple of the key heads each give one error line naming the fault or the
# field (exit 1); /dev/zero is refused at once, read no further than a header
# (exit 1); a missing file is bad usage (exit 2).
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
echo "1..11"
if [ -z "$python" ]; then
    for i in 1 2 3 4 5 6 7 8 9 10 11; do echo "ok $i # SKIP python3 not found"; done
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
check "bytes after the payload" 1 "8 bytes after the page's payload" trailing
check "a reserved byte set" 1 "reserved byte 86 is 0x01" reserved
check "a lower bound on a gdn model" 1 "has_lower_bound 1 on a gdn model" lower_bound
check "value heads no multiple of the key heads" 1 "value_heads 3 is not a multiple of heads 2" \
    value_heads
n=$((n + 1))
# an endless stream of zeros: one header's worth is read, then refused
timeout 10 "$ssmstate" inspect /dev/zero >/dev/null 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -qF "not a state page: bad magic" "$tmp/err" &&
    [ "$(wc -l <"$tmp/err")" -eq 1 ]; then
    echo "ok $n - /dev/zero is refused at once"
else
    echo "not ok $n - /dev/zero is refused at once (exit $rc)"
    sed 's/^/# /' "$tmp/err"
    fails=$((fails + 1))
fi
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
