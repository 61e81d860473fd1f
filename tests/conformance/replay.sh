#!/bin/sh
# make check: the conformance suite against the build's replay plugin, by its
# file (tests/conformance/main.c says how to run it by hand). TAP on stdout.
top_builddir=${SSM_TOP_BUILDDIR:-$(pwd)}
plugin=$top_builddir/.libs/replay.so
# Skipped only while plugins/replay is not part of the build at all; once the
# build makes replay.la, a missing plugin is a failure.
if [ ! -f "$plugin" ]; then
    if grep -q 'replay\.la' "$top_builddir/Makefile" 2>/dev/null; then
        echo "Bail out! replay.la is in the build but $plugin is missing"
        exit 1
    fi
    echo "1..0 # SKIP replay plugin not built"
    exit 0
fi
# CPU contexts here; tests/gpu/conform_cuda.gpu runs the suite on CUDA ones.
SSM_CONFORM_DEVICE=cpu
export SSM_CONFORM_DEVICE
exec "$top_builddir/tests/conformance/check_conformance" "$plugin"
