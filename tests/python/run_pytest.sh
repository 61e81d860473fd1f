#!/bin/sh
# The Python binding's tests (tests/python, pytest) against this build's
# library and plugins: SSMSTATE_LIBRARY is the build tree's
# .libs/libssmstate.so.0, SSMSTATE_PLUGIN_PATH its .libs. Prints TAP, one
# line per pytest test (its skips as SKIP), and pytest's own report as
# comments when a test fails.
#
# The whole script reports SKIP ("1..0 # SKIP": the TAP driver's form of
# exit 77) when no python3 with pytest and NumPy is found, and on a build
# with sanitizers (an instrumented library cannot be loaded into an
# uninstrumented interpreter). Set PYTHON to choose the interpreter.
#
# make check sets SSM_TOP_SRCDIR, SSM_TOP_BUILDDIR and SSMSTATE_PLUGIN_PATH;
# run by hand from a build directory, the defaults below find everything.

top_srcdir=${SSM_TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${SSM_TOP_BUILDDIR:-$(pwd)}
: "${SSMSTATE_PLUGIN_PATH:=$top_builddir/.libs}"
lib=$top_builddir/.libs/libssmstate.so.0

python=
for candidate in ${PYTHON:-} python3 /usr/bin/python3; do
    if "$candidate" -c 'import pytest, numpy' >/dev/null 2>&1; then
        python=$candidate
        break
    fi
done
if [ -z "$python" ]; then
    echo "1..0 # SKIP python3 with pytest and numpy not found (Debian: python3-pytest python3-numpy)"
    exit 0
fi
if [ ! -f "$lib" ]; then
    echo "Bail out! $lib is not built"
    exit 1
fi
if ldd "$lib" 2>/dev/null | grep -Eq 'lib(a|t|ub|l)san'; then
    echo "1..0 # SKIP libssmstate is built with sanitizers: Python cannot load it"
    exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ssmstate-pytest.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM

SSMSTATE_LIBRARY=$lib
PYTHONDONTWRITEBYTECODE=1
export SSMSTATE_LIBRARY SSMSTATE_PLUGIN_PATH PYTHONDONTWRITEBYTECODE
export SSM_TOP_SRCDIR="$top_srcdir"
# No cache or bytecode is written: the source tree may be read-only (distcheck).
"$python" -m pytest -p no:cacheprovider -q -rs --rootdir "$top_srcdir/tests/python" \
    --junitxml="$tmp/results.xml" "$top_srcdir/tests/python" >"$tmp/pytest.log" 2>&1
status=$?

# pytest's JUnit XML as TAP; pytest's report as comments when anything failed.
"$python" - "$tmp/results.xml" "$tmp/pytest.log" "$status" <<'PY'
import re
import sys
import xml.etree.ElementTree as ET

results, log, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    cases = list(ET.parse(results).getroot().iter("testcase"))
except (OSError, ET.ParseError) as e:
    cases = []
lines, failed = [], 0
for i, case in enumerate(cases, 1):
    module = case.get("classname", "").split(".")[-1]
    name = (module + "::" if module else "") + case.get("name", "?")
    bad = case.find("failure")
    if bad is None:
        bad = case.find("error")
    skipped = case.find("skipped")
    if bad is not None:
        failed += 1
        lines.append(f"not ok {i} - {name}")
    elif skipped is not None:
        why = skipped.get("message") or "skipped"
        found = re.search(r"Skipped: (.*?)['\"]?\)?\s*$", skipped.text or "", re.S)
        if why == "collection skipped" and found:  # a whole module: its reason
            why = found.group(1)
        why = " ".join(why.split())
        lines.append(f"ok {i} - {name} # SKIP {why}")
    else:
        lines.append(f"ok {i} - {name}")
if status not in (0, 1) or (status == 1 and not failed):
    lines.append(f"not ok {len(cases) + 1} - pytest exited with status {status}")
    failed += 1
print(f"1..{len(lines)}")
print("\n".join(lines))
if failed:
    with open(log, errors="replace") as f:
        for line in f:
            print("# " + line.rstrip("\n"))
PY
exit 0
