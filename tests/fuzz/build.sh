#!/bin/sh
# Builds the libFuzzer harnesses (`make fuzz`): the core (core/ and its
# folders), the kernels (kernels/ and plugins/common/, linked into each
# plugin) and the three built-in plugins compiled straight from the sources
# with clang and -fsanitize=fuzzer-no-link,address,undefined (the checksum
# routines of coverage-ignore.txt without coverage callbacks; no configure:
# a generated config.h without CUDA; the plugins' directory compiled in as
# the installed one, so no SSMSTATE_PLUGIN_PATH is needed), then each
# harness linked with -fsanitize=fuzzer (fuzz_config also with tools/workload.c, the
# command's reader of [workload]). Rebuilds only what is older than its sources.
# Usage: build.sh SRCDIR OUTDIR VERSION ($FUZZ_CC: the compiler, clang;
# $FUZZ_JOBS: parallel compiles, 2). Writes OUTDIR/fuzz_{config,page,step}
# and OUTDIR/plugins/{native,compact,replay}.so.
set -eu
src=$1 out=$2 version=$3
cc=${FUZZ_CC:-clang}
jobs=${FUZZ_JOBS:-2}
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
    "$cc" -x c -fsanitize=fuzzer,address,undefined -o /dev/null - 2>/dev/null; then
    echo "build.sh: $cc cannot build libFuzzer programs (-fsanitize=fuzzer); set FUZZ_CC" >&2
    exit 1
fi
mkdir -p "$out/obj" "$out/plugins" "$out/gen"
printf '#define PACKAGE_VERSION "%s"\n#define VERSION "%s"\n' "$version" "$version" \
    >"$out/gen/config.h.new"
if cmp -s "$out/gen/config.h.new" "$out/gen/config.h"; then
    rm -f "$out/gen/config.h.new"
else
    mv "$out/gen/config.h.new" "$out/gen/config.h"
fi
inih_cflags=$(pkg-config --cflags inih 2>/dev/null || true)
inih_libs=$(pkg-config --libs inih 2>/dev/null || echo -linih)
cflags="-std=gnu11 -g -O1 -fno-omit-frame-pointer -ffp-contract=off -fPIC -fvisibility=hidden
 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link
 -fsanitize-coverage-ignorelist=$src/tests/fuzz/coverage-ignore.txt
 -I$out/gen -I$src/include -I$src $inih_cflags -DSSM_PLUGIN_DIR=\"$out/plugins\""
export cc cflags out src

# Objects: one per source, rebuilt when a source or header of the tree is newer.
obj_of() { echo "$out/obj/$(echo "$1" | tr / _ | sed 's/\.c$/.o/')"; }
stale=
for f in "$src"/core/*.c "$src"/core/*/*.c "$src"/kernels/*.c "$src"/plugins/*/*.c; do
    rel=${f#"$src"/}
    o=$(obj_of "$rel")
    if [ ! -f "$o" ] || [ "$src/tests/fuzz/coverage-ignore.txt" -nt "$o" ] || [ -n "$(find "$src/core" "$src/kernels" "$src/plugins" "$src/include" \
        "$out/gen" -name '*.[ch]' -newer "$o" | head -n 1)" ]; then
        stale="$stale $rel"
    fi
done
if [ -n "$stale" ]; then
    echo "build.sh: compiling$(echo $stale | wc -w | sed 's/^/ /') sources with $cc"
    # shellcheck disable=SC2086
    printf '%s\n' $stale | xargs -P "$jobs" -I{} sh -c \
        'o="$out/obj/$(echo {} | tr / _ | sed "s/\.c\$/.o/")"; $cc $cflags -c "$src/{}" -o "$o"'
fi
core=$(for f in "$src"/core/*.c "$src"/core/*/*.c; do obj_of "${f#"$src"/}"; done)
kernels=$(for f in "$src"/kernels/*.c "$src"/plugins/common/*.c; do obj_of "${f#"$src"/}"; done)
for mode in native compact replay; do
    objs=$(for f in "$src"/plugins/$mode/*.c; do obj_of "${f#"$src"/}"; done)
    # shellcheck disable=SC2086
    $cc $cflags -shared -o "$out/plugins/$mode.so" $objs $kernels -lm
done
for h in config page step; do
    extra= # the config harness also runs the command's [workload] reader
    [ "$h" = config ] && extra="$src/tools/workload.c"
    # shellcheck disable=SC2086
    $cc $cflags -fsanitize=fuzzer -rdynamic -o "$out/fuzz_$h" "$src/tests/fuzz/fuzz_$h.c" \
        "$src/tests/fuzz/fuzz_common.c" $extra $core $inih_libs -ldl -lm -lpthread
done
echo "build.sh: $out/fuzz_config, fuzz_page, fuzz_step"
