#!/bin/sh
# `ssmstate serve` end to end on a tiny CPU model (examples/serve-tiny.ini),
# all three modes, both state dtypes (TAP): exit 0; a table line per mode
# and dtype with its numbers and a passed cross-check (against a CPU native
# context, bit for bit); the ratios; the JSON document (its figures:
# tests/plot_serve.sh); the same seed giving the same token counts; replay's
# folds counted; bad usage and a budget that holds no request exit 2 with
# one line on stderr; a spoiled output (SSMSTATE_SERVE_TEST_SPOIL) fails the
# check and exits 1; --device cuda runs every mode on a GPU (exit 0, every
# mode holding requests) and exits 77 only where there is no GPU or no CUDA;
# the cross-check gives the same lines, JSON and exit status on 1 thread and
# on 3 (--check-threads), passed and spoiled; measured steps with no row to
# run are idle steps, neither timed nor counted; on the CPU the defaults make
# the example a run of seconds; Ctrl-C (SIGINT) stops a run, which prints and
# writes what it measured until then and exits 130; a progress line per level
# on stderr unless --quiet.
set -u
ssmstate="$SSM_TOP_BUILDDIR/ssmstate"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The example with heads of 16 instead of 32 (the CPU's chunked prefill
# costs K V per token): a whole sweep of every mode and dtype in seconds.
config="$tmp/serve-tiny.ini"
sed -e 's/^key_dim = 32/key_dim = 16/' -e 's/^value_dim = 32/value_dim = 16/' \
    "$SSM_TOP_SRCDIR/examples/serve-tiny.ini" >"$config"
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
small="--device cpu --state-budget 1M --steps 12 --warmup-steps 60 --prompt 4:48 --output 4:24
       --chunk 32 --check 3 --seed 5 --quiet"

echo "1..16"
# shellcheck disable=SC2086 # $small is several words on purpose
"$ssmstate" serve "$config" $small --modes all --state f32,bf16 --json "$tmp/run.json" \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
cp "$tmp/err" "$tmp/quiet_err"
cat "$tmp/out" >>"$tmp/err"
report "$rc" "serve runs every mode and dtype (exit $rc)"

lines=0
x='[0-9.]+'
for mode in native compact replay; do
    got=$(grep -cE "^  $mode +$x (B|KiB|MiB) +[0-9]+ +$x +$x +$x +[-0-9.]+ +pass$" "$tmp/out")
    [ "$got" -eq 2 ] && lines=$((lines + 1))
done
[ "$lines" -eq 3 ]
report $? "a table line with a passed check per mode and dtype"

grep -q "ratios: concurrent requests replay/native [0-9.]*x" "$tmp/out" &&
    grep -q "tokens/s at native's largest concurrency" "$tmp/out"
report $? "the ratios the serving targets ask about"

[ "$(grep -c "^  check [a-z]*: [0-9]* requests .* against cpu native: .*bit-identical.*: pass$" \
    "$tmp/out")" -eq 6 ]
report $? "each mode cross-checked against a CPU native context, bit for bit"

grep -q '"command":"serve"' "$tmp/run.json" &&
    [ "$(grep -o '"mode":"[a-z]*"' "$tmp/run.json" | wc -l)" -eq 6 ] &&
    [ "$(grep -o '"pass":true' "$tmp/run.json" | wc -l)" -eq 6 ]
report $? "the JSON document: 2 tables of 3 modes, every check passed"

grep -o '"mode":"replay".*' "$tmp/run.json" | grep -q '"folds":[1-9]'
report $? "replay's folds are counted"

# The bf16 table again, without replay: its native and compact token counts.
tokens='"tokens":[0-9]*,"verify_rows"'
# shellcheck disable=SC2086
"$ssmstate" serve "$config" $small --modes native,compact --state bf16 \
    --json "$tmp/again.json" >/dev/null 2>"$tmp/err" &&
    sed -n 2p "$tmp/run.json" | sed 's/"mode":"replay".*//' | grep -o "$tokens" >"$tmp/a" &&
    grep -o "$tokens" "$tmp/again.json" >"$tmp/b" && [ -s "$tmp/b" ] &&
    diff "$tmp/a" "$tmp/b" >"$tmp/err"
report $? "the same seed serves the same tokens"

bad=0
for args in "--check x" "--prompt 9:3" "--state f16" "--modes native,native" "--rate 0" ""; do
    # shellcheck disable=SC2086
    "$ssmstate" serve $args ${args:+"$config"} >/dev/null 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
        echo "# serve $args: exit $rc, $(wc -l <"$tmp/err") stderr lines"
        bad=1
    fi
done
report "$bad" "bad usage exits 2 with one line"

"$ssmstate" serve "$config" --device cpu --state-budget 1K --modes native --quiet \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "holds no request" "$tmp/out"
report $? "a budget that holds no request exits 2 and says so"

# shellcheck disable=SC2086
SSMSTATE_SERVE_TEST_SPOIL=1 "$ssmstate" serve "$config" $small --modes compact --state f32 \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] && grep -qE "^  check compact: .*: FAIL$" "$tmp/out"
report $? "a spoiled output fails the cross-check and the exit status (exit $rc)"

# On a GPU: the example itself (the CUDA kernels take key_dim 32, not the 16
# above), a budget that holds requests of every mode there (a slot's plan
# adds about 250 KiB of GPU scratch at these dims: 10 to 14 requests in 4
# MiB), each step traced (SSMSTATE_SERVE_TRACE) and a time limit, so a
# failure or a hang shows its last lines in the log. Exit 77 only when the
# command says there is no GPU or no CUDA.
limit=""
command -v timeout >/dev/null 2>&1 && limit="timeout 300"
# shellcheck disable=SC2086 # $limit is a command and its argument
SSMSTATE_SERVE_TRACE=1 $limit "$ssmstate" serve "$SSM_TOP_SRCDIR/examples/serve-tiny.ini" \
    --device cuda --state-budget 4M --steps 2 --warmup-steps 2 --check 0 --quiet \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
ok=1
skip=
if [ "$rc" -eq 77 ]; then
    # A SKIP, never a pass, and only where there is no GPU to run on: with
    # one visible, a CUDA path that says "no GPU" is broken.
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU" &&
        ! grep -q "this build has no CUDA" "$tmp/err"; then
        ok=1
    elif grep -qE "no GPU visible|this build has no CUDA" "$tmp/err"; then
        ok=0
        skip=" # SKIP $(grep -oE "no GPU visible|this build has no CUDA" "$tmp/err" | head -n 1)"
    fi
elif [ "$rc" -eq 0 ]; then
    lines=0
    for mode in native compact replay; do
        got=$(grep -cE "^  $mode +$x (B|KiB|MiB) +[1-9][0-9]* +$x +$x +$x +[-0-9.]+ +-$" \
            "$tmp/out")
        [ "$got" -eq 2 ] && lines=$((lines + 1))
    done
    [ "$lines" -eq 3 ] && ok=0
fi
if [ "$ok" -ne 0 ]; then
    { echo "# serve --device cuda: exit $rc$([ "$rc" -eq 124 ] && echo " (timed out)");" \
          "stdout (last 30 lines):"
      tail -n 30 "$tmp/out" | sed 's/^/#   /'
      echo "# stderr (last 30 lines):"
      tail -n 30 "$tmp/err" | sed 's/^/#   /'; } >&2
fi
: >"$tmp/err" # shown above; report() need not repeat it
report "$ok" "--device cuda: every mode runs on a GPU, 77 without one (exit $rc)$skip"

# The check on one thread and on three: the same check lines, JSON check
# objects and exit status (native bit for bit, replay's identity outputs
# within the bound), passed, then spoiled. 3 requests x 2 layers: 6 replays.
{ cat "$config"; echo "outputs = identity"; } >"$tmp/identity.ini" # [replay] is last
same=0
for spoil in "" SSMSTATE_SERVE_TEST_SPOIL=1; do
    for threads in 1 3; do
        # shellcheck disable=SC2086 # $spoil is nothing or one assignment
        env $spoil "$ssmstate" serve "$tmp/identity.ini" $small \
            --modes native,replay --state f32 --check-threads "$threads" \
            --json "$tmp/threads$threads.json" >"$tmp/threads$threads.out" 2>>"$tmp/err"
        echo "exit $?" >"$tmp/checks$threads"
        grep "^  check " "$tmp/threads$threads.out" >>"$tmp/checks$threads"
        grep -o '"check":{[^}]*}' "$tmp/threads$threads.json" >>"$tmp/checks$threads"
    done
    [ "$(grep -c '"check":{' "$tmp/checks1")" -eq 2 ] &&
        diff "$tmp/checks1" "$tmp/checks3" >>"$tmp/err" || same=1
    if [ -z "$spoil" ]; then
        [ "$(grep -c '^  check [a-z]*: 3 requests .*: pass$' "$tmp/checks1")" -eq 2 ] &&
            grep -qx "exit 0" "$tmp/checks1" || same=1
    else
        [ "$(grep -c '^  check [a-z]*: .*: FAIL$' "$tmp/checks1")" -eq 2 ] &&
            grep -qx "exit 1" "$tmp/checks1" || same=1
    fi
done
report "$same" "the check's result does not depend on --check-threads (1 and 3)"

# Arrivals so rare that most measured steps have nothing to run: those are
# counted as idle, and neither timed nor counted as steps (a p50 of an empty
# loop iteration, tens of nanoseconds, was reported before).
"$ssmstate" serve "$config" --device cpu --modes native --state f32 --rate 0.01 --steps 12 \
    --warmup-steps 1 --check 0 --prompt 4:48 --output 4:24 --chunk 32 --state-budget 1M \
    --quiet --json "$tmp/idle.json" >"$tmp/out" 2>"$tmp/err" &&
    grep -q '"steps":12,"idle_steps":[1-9]' "$tmp/idle.json" &&
    ! grep -qE '"p50_ms":[0-9.]*e-0?[5-9]' "$tmp/idle.json"
report $? "steps with nothing to run are idle steps, not timed"

# On the CPU the defaults are the CPU's (a budget of 1 MiB, 50 measured
# steps, short prompts): the example itself, nothing but the device and one
# mode given, finishes in seconds (the GPU's defaults took many minutes).
limit=""
command -v timeout >/dev/null 2>&1 && limit="timeout 120"
# shellcheck disable=SC2086 # $limit is a command and its argument
$limit "$ssmstate" serve "$SSM_TOP_SRCDIR/examples/serve-tiny.ini" --device cpu --modes native \
    --state f32 --quiet >"$tmp/out" 2>"$tmp/err" &&
    grep -q "state budget 1.00 MiB; .* prompts 16..128 .* outputs 16..64; prefill 128 .*; 50 measured steps per level" \
        "$tmp/out"
report $? "on the CPU the defaults are the CPU's: the example runs in seconds"

# Ctrl-C: the run stops at the end of a step, prints the tables of what it
# measured, writes --json (marked interrupted) and exits 130.
"$ssmstate" serve "$config" --device cpu --json "$tmp/stopped.json" >"$tmp/out" 2>"$tmp/err" &
pid=$!
tries=0
while [ "$tries" -lt 600 ] && ! grep -q "concurrency 2:" "$tmp/err"; do
    sleep 0.1
    tries=$((tries + 1))
done
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] && grep -q "^ssmstate serve: .* on the CPU$" "$tmp/out" &&
    grep -q "interrupted (Ctrl-C)" "$tmp/out" &&
    grep -q "^ssmstate: serve: interrupted (Ctrl-C): what was measured until then is above, in --json$" \
        "$tmp/err" &&
    grep -q '"interrupted":true' "$tmp/stopped.json" &&
    grep -q '"points":\[{"concurrency":1,' "$tmp/stopped.json"
report $? "Ctrl-C stops the run and keeps what was measured (exit $rc)"

# Progress: a line per level on stderr as each finishes, none with --quiet.
quiet_lines=$(grep -c "concurrency [0-9]*: " "$tmp/quiet_err" 2>/dev/null || true)
# shellcheck disable=SC2086 # $small is several words on purpose
"$ssmstate" serve "$config" $(echo $small | sed 's/--quiet//') --modes native --state f32 \
    >/dev/null 2>"$tmp/err"
progress="^serve: [a-z]+ f32 native: concurrency [0-9]+: $x tokens/s, step p50 [0-9.e+-]+ ms"
progress="$progress \\([0-9]+ warm-up \\+ [0-9]+ steps\\)$"
[ "$(grep -cE "$progress" "$tmp/err")" -ge 1 ] && [ "$quiet_lines" -eq 0 ]
report $? "a progress line per level on stderr, none with --quiet"
[ "$fails" -eq 0 ]
