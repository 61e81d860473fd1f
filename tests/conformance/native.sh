#!/bin/sh
# make check: the conformance suite against the build's native plugin, by its
# file (tests/conformance/main.c says how to run it by hand). TAP on stdout.
top_builddir=${SSM_TOP_BUILDDIR:-$(pwd)}
plugin=$top_builddir/.libs/native.so
exec "$top_builddir/tests/conformance/check_conformance" "$plugin"
