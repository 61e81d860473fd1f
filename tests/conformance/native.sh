#!/bin/sh
# make check: the conformance suite against the build's native plugin, by its
# file (tests/conformance/main.c says how to run it by hand). TAP on stdout.
top_builddir=${SSM_TOP_BUILDDIR:-$(pwd)}
plugin=$top_builddir/.libs/native.so
# CPU contexts here; tests/gpu/conform_cuda.gpu runs the suite on CUDA ones.
SSM_CONFORM_DEVICE=cpu
export SSM_CONFORM_DEVICE
exec "$top_builddir/tests/conformance/check_conformance" "$plugin"
