"""The ctypes mirrors of the C structs against the headers: every size and field
offset, read from a probe compiled with the C compiler (skipped without one)."""
import os
import shlex
import shutil
import subprocess

import pytest

from ssmstate import _lib

TOP = os.environ.get("SSM_TOP_SRCDIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
INCLUDE = os.path.join(TOP, "include")


def probe_source():
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "ssmstate/ssmstate.h"',
             "int main(void) {"]
    for cname, struct in _lib.STRUCTS.items():
        lines.append(f'    printf("{cname} %zu\\n", sizeof({cname}));')
        for field, *_ in struct._fields_:
            lines.append(f'    printf("{cname}.{field} %zu\\n", offsetof({cname}, {field}));')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def test_structs_match_the_headers(tmp_path):
    cc = shlex.split(os.environ.get("CC", "")) or [shutil.which("cc") or shutil.which("gcc")]
    if not cc[0] or not os.path.isfile(os.path.join(INCLUDE, "ssmstate", "ssmstate.h")):
        pytest.skip("no C compiler or no headers")
    src = tmp_path / "probe.c"
    src.write_text(probe_source())
    exe = tmp_path / "probe"
    r = subprocess.run(cc + ["-I", INCLUDE, str(src), "-o", str(exe)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    want = dict(line.split() for line in subprocess.check_output([str(exe)], text=True)
                .splitlines())
    got = {}
    for cname, struct in _lib.STRUCTS.items():
        got[cname] = str(ctypes_sizeof(struct))
        for field, *_ in struct._fields_:
            got[f"{cname}.{field}"] = str(getattr(struct, field).offset)
    assert got == want


def ctypes_sizeof(struct):
    import ctypes
    return ctypes.sizeof(struct)


def test_enums_match_the_library():
    for status in _lib.Status:
        from ssmstate import status_name
        assert status_name(status) == "SSM_" + status.name
