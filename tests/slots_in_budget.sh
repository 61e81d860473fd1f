#!/bin/sh
# How many slots `ssmstate check --pool-bytes` says a budget holds, for a
# mode whose shared bytes grow with the capacity (TAP): the test plugin
# growing_shared keeps 1000 bytes a slot and 500 + 10000 min(capacity, 4)
# shared, so N bytes hold the most c with 1000 c + shared(c) <= N, not
# (N - shared(1)) / 1000.
set -u
ssmstate="$SSM_TOP_BUILDDIR/ssmstate"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -e 's|^mode *=.*|mode = growing_shared|' \
    -e "s|^;plugin_dir = .*|plugin_dir = $SSM_TOP_BUILDDIR/tests/.libs|" \
    "$SSM_TOP_SRCDIR/examples/quickstart.ini" >"$tmp/c.ini"
n=0
fails=0
slots_in() { # budget: the slot count of growing_shared's row
    "$ssmstate" check "$tmp/c.ini" --pool-bytes "$1" 2>"$tmp/err" |
        awk '$1 == "growing_shared*" { print $NF }'
}
expect() { # budget, slots, name
    n=$((n + 1))
    got=$(slots_in "$1")
    if [ "$got" = "$2" ]; then
        echo "ok $n - $3"
    else
        echo "not ok $n - $3: got '$got', want $2"
        sed 's/^/# /' "$tmp/err"
        fails=$((fails + 1))
    fi
}
echo "1..4"
expect 10000 0 "a budget below one slot's pool holds none"
expect 15000 1 "one slot: two would need 22500 bytes (one plan's formula says 4)"
expect 46000 5 "five slots once the shared bytes stop growing (one plan's formula says 35)"
expect 100500 60 "past the bound the shared bytes stay: (100500 - 40500) / 1000"
[ "$fails" -eq 0 ]
