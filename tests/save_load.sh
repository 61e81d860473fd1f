#!/bin/sh
# `ssmstate run --stop-after N --save DIR` and `--load DIR` (docs/pages.md): a
# session checkpointed in native mode and resumed in another process in
# replay or compact mode produces every output block and final state bit for
# bit (64-bit hashes from --hashes) as the session run in one go, and the
# resumed run passes its own checks against the CPU reference. A checkpoint
# of another workload, a corrupted page (named in the error, and an earlier
# --hashes file left as it was), a lane whose committed count its rounds cannot
# give, counters past what the workload can reach (past 64 bits, negative), a
# truncated session.txt (naming the line or field it ends before), --save
# without --stop-after and a missing checkpoint are refused with one error line
# (exit 2), a mismatched config naming the field that differs. --save creates
# missing parents. A lane loaded with NaNs in its state fails the run, its
# bf16 ulps printed as "nan". Prints TAP.
set -u
ssmstate="$SSM_TOP_BUILDDIR/ssmstate"
config="$SSM_TOP_SRCDIR/examples/quickstart.ini"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
report() { # ok?, name
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        fails=$((fails + 1))
        sed 's/^/# /' "$tmp/err" 2>/dev/null
    fi
}
in_mode() { sed "s/^mode = native/mode = $1/" "$config" >"$tmp/$1.ini"; }
in_mode replay
in_mode compact
sed 's/^seed = .*/seed = 7/' "$config" >"$tmp/other_seed.ini"

echo "1..17"
"$ssmstate" run "$config" --quiet --hashes "$tmp/whole.txt" >"$tmp/out" 2>"$tmp/err"
report $? "the whole session passes"
sort "$tmp/whole.txt" >"$tmp/whole.sorted"

# stop after 5 forwards (no request finished yet) and after 14 (some have)
for case in "5 replay" "14 compact"; do
    set -- $case
    rm -rf "$tmp/ckpt"
    "$ssmstate" run "$config" --quiet --stop-after "$1" --save "$tmp/ckpt" \
        --hashes "$tmp/first.txt" >"$tmp/out" 2>"$tmp/err" &&
        "$ssmstate" run "$tmp/$2.ini" --quiet --load "$tmp/ckpt" \
            --hashes "$tmp/second.txt" >"$tmp/out" 2>"$tmp/err" &&
        grep -q "verdict     PASS" "$tmp/out" &&
        sort "$tmp/first.txt" "$tmp/second.txt" | cmp -s - "$tmp/whole.sorted"
    report $? "saved after $1 forwards in native, resumed in $2: the same outputs and states"
done

one_error() { # rc, expected text
    [ "$1" -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF -- "$2" "$tmp/err"
}
"$ssmstate" run "$tmp/other_seed.ini" --quiet --load "$tmp/ckpt" >"$tmp/out" 2>"$tmp/err"
one_error $? "was saved with [workload] seed = 42; this config has 7"
report $? "a checkpoint of another workload is refused, naming the field"

# one flipped byte in a page's payload: the checksum catches it
cp "$tmp/ckpt/lane-0.page" "$tmp/lane-0.page"
printf '\377' | dd of="$tmp/ckpt/lane-0.page" bs=1 seek=200 conv=notrunc 2>/dev/null
cp "$tmp/whole.txt" "$tmp/kept.txt"
"$ssmstate" run "$tmp/replay.ini" --quiet --load "$tmp/ckpt" --hashes "$tmp/kept.txt" \
    >"$tmp/out" 2>"$tmp/err"
one_error $? "ckpt/lane-0.page: page payload checksum mismatch"
report $? "a corrupted page is refused, by name"
cmp -s "$tmp/whole.txt" "$tmp/kept.txt" && [ ! -e "$tmp/kept.txt.tmp" ]
report $? "the failed run left the earlier --hashes file as it was"
cp "$tmp/lane-0.page" "$tmp/ckpt/lane-0.page"

# a lane line whose committed count its prompt and rounds cannot give
cp "$tmp/ckpt/session.txt" "$tmp/session.txt"
# (88 = prompt_max 40 + 12 rounds of 4: in range, but no lane's prompt and rounds give it)
sed 's/committed [0-9]*/committed 88/' "$tmp/session.txt" >"$tmp/ckpt/session.txt"
"$ssmstate" run "$tmp/replay.ini" --quiet --load "$tmp/ckpt" >"$tmp/out" 2>"$tmp/err"
one_error $? "tokens committed, which its prompt of"
report $? "an impossible committed count is refused"
sed 's/committed [0-9]*/committed 2147483647/' "$tmp/session.txt" >"$tmp/ckpt/session.txt"
"$ssmstate" run "$tmp/replay.ini" --quiet --load "$tmp/ckpt" >"$tmp/out" 2>"$tmp/err"
one_error $? "lane's committed tokens 2147483647 is out of range"
report $? "a committed count past the workload's longest request is refused"
cp "$tmp/session.txt" "$tmp/ckpt/session.txt"

# counters a session cannot reach: past 64 bits, negative
sed 's/^forwards [0-9]*/forwards 18446744073709551615/' "$tmp/session.txt" >"$tmp/ckpt/session.txt"
"$ssmstate" run "$tmp/replay.ini" --quiet --load "$tmp/ckpt" >"$tmp/out" 2>"$tmp/err"
one_error $? "session.txt: forwards 18446744073709551615 is out of range" &&
    ! grep -q PASS "$tmp/out"
report $? "a forwards count past 64 bits is refused, by name"
sed 's/^tokens [0-9]*/tokens -1000/' "$tmp/session.txt" >"$tmp/ckpt/session.txt"
"$ssmstate" run "$tmp/replay.ini" --quiet --load "$tmp/ckpt" >"$tmp/out" 2>"$tmp/err"
one_error $? "session.txt: tokens: prefill tokens -1000 is out of range" &&
    ! grep -q PASS "$tmp/out"
report $? "a negative token count is refused, by name"
sed 's/^lane 0 request [0-9]*/lane 0 request 99999999999/' "$tmp/session.txt" \
    >"$tmp/ckpt/session.txt"
"$ssmstate" run "$tmp/replay.ini" --quiet --load "$tmp/ckpt" >"$tmp/out" 2>"$tmp/err"
one_error $? "lane's request 99999999999 is out of range"
report $? "a lane's request past 32 bits is refused, by name"

# truncated: inside the workload line, and after it
head -c 60 "$tmp/session.txt" >"$tmp/ckpt/session.txt"
"$ssmstate" run "$tmp/replay.ini" --quiet --load "$tmp/ckpt" >"$tmp/out" 2>"$tmp/err"
one_error $? "the file ends inside the workload line, in [workload] acceptance"
report $? "a session.txt cut in its workload line says where it ends"
head -n 3 "$tmp/session.txt" >"$tmp/ckpt/session.txt"
"$ssmstate" run "$tmp/replay.ini" --quiet --load "$tmp/ckpt" >"$tmp/out" 2>"$tmp/err"
one_error $? "ends before the tokens line"
report $? "a session.txt cut after its forwards line names the missing line"
cp "$tmp/session.txt" "$tmp/ckpt/session.txt"

# --save creates the directories it needs
"$ssmstate" run "$config" --quiet --stop-after 3 --save "$tmp/new/deeper/ckpt" \
    >"$tmp/out" 2>"$tmp/err" && [ -s "$tmp/new/deeper/ckpt/session.txt" ]
report $? "--save creates missing parent directories"

"$ssmstate" run "$config" --quiet --save "$tmp/ckpt2" >"$tmp/out" 2>"$tmp/err"
one_error $? "go together"
report $? "--save without --stop-after is refused"

"$ssmstate" run "$tmp/replay.ini" --quiet --load "$tmp/nothing" >"$tmp/out" 2>"$tmp/err"
one_error $? "session.txt"
report $? "a missing checkpoint is refused"

# A lane whose state holds NaNs (a page with its checksums made again): the
# outputs it gives are NaN, and the summary says "nan" ulps (never 2^63 - 1).
python=
for candidate in ${PYTHON:-} python3 /usr/bin/python3; do
    command -v "$candidate" >/dev/null 2>&1 && python=$candidate && break
done
if [ -z "$python" ]; then
    n=$((n + 1))
    echo "ok $n # SKIP python3 not found"
else
    "$python" - "$tmp/ckpt/lane-0.page" "$(dirname "$0")" <<'EOF_PY'
import struct, sys
sys.path.insert(0, sys.argv[2])
from make_page import crc32c
page = bytearray(open(sys.argv[1], "rb").read())
H, HV, K, V, W = struct.unpack_from("<5I", page, 28)
sd, ad, h0, h1 = struct.unpack_from("<4I", page, 56)
g = HV // H
D = 2 * (h1 - h0) // g * K + (h1 - h0) * V
at = 96 + (W - 1) * D * (2 if ad == 2 else 4)  # layer 0's state
for i in range(16):
    if sd == 2:
        struct.pack_into("<H", page, at + 2 * i, 0x7FC0)
    else:
        struct.pack_into("<I", page, at + 4 * i, 0x7FC00000)
struct.pack_into("<I", page, 80, crc32c(bytes(page[96:])))
struct.pack_into("<I", page, 92, crc32c(bytes(page[:92])))
open(sys.argv[1], "wb").write(page)
EOF_PY
    "$ssmstate" run "$tmp/replay.ini" --quiet --load "$tmp/ckpt" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    cat "$tmp/out" >>"$tmp/err"
    [ "$rc" -eq 1 ] && grep -q "relative RMS nan .* elements at most nan bf16 ulps apart" "$tmp/out" &&
        ! grep -q "9223372036854775807" "$tmp/out" && grep -q "verdict     FAIL" "$tmp/out"
    report $? "a NaN state's outputs are reported as nan ulps, and fail"
fi
[ "$fails" -eq 0 ]
