#!/bin/sh
# The command's failure modes (TAP): a bad config, a missing plugin, a
# wrong-ABI plugin, an unknown mode in --modes, a bad --pool-bytes, an
# out-of-range --stop-after, an empty list item, an unwritable serve --json, an
# extra inspect argument, a [workload] no run could finish (refused by check
# and run at its line), a --device that names no device (run, conform), and a
# conformance run on a file that is no usable plugin (ssmstate conform,
# check_conformance) each give exactly one error line on stderr and exit 2. A config on a GPU that cannot run (no GPU, no
# CUDA build) gets one message from run, bench and serve; `conform --device
# cuda` there says why in one line and exits 77.
set -u
ssmstate="$SSM_TOP_BUILDDIR/ssmstate"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

model='[model]
kind = gdn
layers = 1
heads = 1
value_heads = 2
key_dim = 8
value_dim = 8
conv_width = 4'

n=0
fails=0
expect_one_line() { # name, expected substring, command...
    name=$1 want=$2
    shift 2
    n=$((n + 1))
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$tmp/err"; then
        echo "ok $n - $name"
    else
        echo "not ok $n - $name (exit $rc, $lines stderr lines)"
        sed 's/^/# /' "$tmp/err"
        fails=$((fails + 1))
    fi
}

echo "1..22"
printf '%s\nheads_typo = 3\n[state]\nmode = native\nstate_dtype = f32\nmax_requests = 1\n' "$model" >"$tmp/bad.ini"
expect_one_line "unknown key" "bad.ini:9:" "$ssmstate" check "$tmp/bad.ini"
expect_one_line "unknown key (run)" "bad.ini:9:" "$ssmstate" run "$tmp/bad.ini"
printf '%s\n[state]\nmode = nosuch\nstate_dtype = f32\nmax_requests = 1\n' "$model" >"$tmp/missing.ini"
expect_one_line "missing plugin" "no plugin for mode 'nosuch'" "$ssmstate" run "$tmp/missing.ini"
printf '%s\n[state]\nmode = wrong_abi\nstate_dtype = f32\nmax_requests = 1\nplugin_dir = %s\n' \
    "$model" "$SSM_TEST_PLUGIN_DIR" >"$tmp/abi.ini"
expect_one_line "wrong ABI plugin" "ABI version 99" "$ssmstate" run "$tmp/abi.ini"
expect_one_line "missing file" "$tmp/none.ini" "$ssmstate" check "$tmp/none.ini"
expect_one_line "bad usage" "usage" "$ssmstate" frobnicate
printf '%s\n[state]\nmode = native\nstate_dtype = f32\nmax_requests = 1\n' "$model" >"$tmp/ok.ini"
expect_one_line "unknown mode in --modes" "unknown mode 'nosuch'" \
    "$ssmstate" run "$tmp/ok.ini" --modes native,nosuch
expect_one_line "--modes with --dump" "cannot be combined" \
    "$ssmstate" run "$tmp/ok.ini" --modes all --dump "$tmp/dump"
expect_one_line "bad --pool-bytes" "--pool-bytes: '40GB'" \
    "$ssmstate" check "$tmp/ok.ini" --pool-bytes 40GB
expect_one_line "--stop-after past 64 bits" "give a number of forwards" \
    "$ssmstate" run "$tmp/ok.ini" --stop-after 99999999999999999999999 --save "$tmp/sv"
expect_one_line "an empty item in a list" "bad argument '1,,2'" \
    "$ssmstate" bench "$tmp/ok.ini" --batches 1,,2
expect_one_line "serve's --json checked before the run" "--json $tmp/none/r.json: cannot write" \
    "$ssmstate" serve "$tmp/ok.ini" --json "$tmp/none/r.json"
expect_one_line "inspect names the extra argument" "bad argument 'extra'" \
    "$ssmstate" inspect "$tmp/ok.ini" extra
printf '%s\n[state]\nmode = native\nstate_dtype = f32\nmax_requests = 1\n[workload]\nprompt_max = 2147483647\n' \
    "$model" >"$tmp/long_prompt.ini"
expect_one_line "a prompt no run could finish, at check" "long_prompt.ini:14: [workload] prompt_max = 2147483647 is out of range" \
    "$ssmstate" check "$tmp/long_prompt.ini"
expect_one_line "a prompt no run could finish, at run" "long_prompt.ini:14: [workload] prompt_max" \
    timeout 60 "$ssmstate" run "$tmp/long_prompt.ini"
expect_one_line "conform on a library that is no plugin" \
    "not a usable mode plugin: $SSM_TEST_PLUGIN_DIR/no_symbol.so is not an ssmstate plugin" \
    "$ssmstate" conform "$SSM_TEST_PLUGIN_DIR/no_symbol.so"
expect_one_line "the conformance runner on a plugin of another ABI" \
    "not a usable mode plugin: $SSM_TEST_PLUGIN_DIR/wrong_abi.so: symbol ssm_plugin_entry_v1 declares plugin ABI version 99" \
    "$SSM_TOP_BUILDDIR/tests/conformance/check_conformance" "$SSM_TEST_PLUGIN_DIR/wrong_abi.so"
# device = cuda where no GPU can run it: run, bench and serve say the same
# thing, the library's (ssm_device_check): "no GPU visible" in a CUDA build
# without a GPU, "no CUDA support" in a build without CUDA.
printf '%s\n[state]\nmode = native\nstate_dtype = f32\nmax_requests = 1\ndevice = cuda\n' \
    "$model" >"$tmp/cuda.ini"
n=$((n + 1))
"$ssmstate" run "$tmp/cuda.ini" --quiet >"$tmp/out" 2>"$tmp/err"
rc=$?
gpu=no # one the driver lists, not hidden by CUDA_VISIBLE_DEVICES=""
if [ "${CUDA_VISIBLE_DEVICES-all}" != "" ] && command -v nvidia-smi >/dev/null 2>&1 &&
    nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    gpu=yes
fi
if [ "$gpu" = yes ] && ! grep -q "this build has no CUDA support" "$tmp/err"; then
    echo "ok $n - one message for a missing GPU # SKIP a GPU is visible"
else
    said=$(sed -n 's/^ssmstate: //p' "$tmp/err")
    "$ssmstate" bench "$tmp/cuda.ini" --quick >/dev/null 2>"$tmp/bench.err"
    bench_rc=$?
    "$ssmstate" serve "$tmp/cuda.ini" --device cuda --quiet >/dev/null 2>"$tmp/serve.err"
    serve_rc=$?
    if [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
        { grep -qF "cuda:0: no GPU visible (" "$tmp/err" ||
            grep -qF "this build has no CUDA support" "$tmp/err"; } &&
        grep -qF -- "$said" "$tmp/bench.err" && grep -qF -- "$said" "$tmp/serve.err"; then
        echo "ok $n - one message for a missing GPU: run, bench and serve"
    else
        echo "not ok $n - one message for a missing GPU (run exit $rc, bench $bench_rc, serve $serve_rc)"
        sed 's/^/# /' "$tmp/err" "$tmp/bench.err" "$tmp/serve.err"
        fails=$((fails + 1))
    fi
fi
expect_one_line "run --device names no device" "--device gpu: give auto, cpu, cuda or cuda:N" \
    "$ssmstate" run "$tmp/ok.ini" --device gpu
expect_one_line "conform --device names no device" "--device: 'gpu' is not cpu, cuda or all" \
    "$ssmstate" conform native --device gpu
n=$((n + 1))
if [ "$gpu" = yes ] && ! grep -q "this build has no CUDA support" "$tmp/err"; then
    echo "ok $n - conform --device cuda without CUDA # SKIP a GPU is visible"
else
    "$ssmstate" conform native --device cuda >"$tmp/out" 2>"$tmp/conform.err"
    rc=$?
    if [ "$rc" -eq 77 ] && [ "$(wc -l <"$tmp/conform.err")" -eq 1 ] &&
        grep -qE "no CUDA contexts to check: cuda:0: (no GPU visible|this build has no CUDA support)" \
            "$tmp/conform.err"; then
        echo "ok $n - conform --device cuda without CUDA: one line, exit 77"
    else
        echo "not ok $n - conform --device cuda without CUDA (exit $rc)"
        sed 's/^/# /' "$tmp/conform.err"
        fails=$((fails + 1))
    fi
fi
long=$(printf '%04080d' 0)
expect_one_line "--dump under a path too long" "path too long" \
    "$ssmstate" run "$tmp/ok.ini" --quiet --dump "$tmp/$long"
[ "$fails" -eq 0 ]
