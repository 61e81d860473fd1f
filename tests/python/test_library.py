"""Finding libssmstate: an explicit SSMSTATE_LIBRARY, and the error that lists
every place tried when nothing is found (each in a fresh interpreter)."""
import os
import subprocess
import sys

import ssmstate

PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")

PROBE = """
import ssmstate
try:
    ssmstate.plugins()
except ssmstate.LibraryNotFoundError as e:
    assert isinstance(e, ssmstate.SsmError) and isinstance(e, OSError)
    print("NOT FOUND")
    print(e)
else:
    print("LOADED", ssmstate.library_path())
"""


def probe(**env):
    full = dict(os.environ, PYTHONPATH=PACKAGE, PYTHONDONTWRITEBYTECODE="1")
    for k, v in env.items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    r = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_explicit_library_that_is_missing():
    out = probe(SSMSTATE_LIBRARY="/nonexistent/libssmstate.so.0")
    assert out.startswith("NOT FOUND"), out
    assert "SSMSTATE_LIBRARY: /nonexistent/libssmstate.so.0" in out
    assert "pkg-config --variable" not in out  # an explicit setting is the only place tried


def test_nothing_found_lists_every_place_tried(tmp_path):
    out = probe(SSMSTATE_LIBRARY=None, PKG_CONFIG_PATH=str(tmp_path),
                PKG_CONFIG_LIBDIR=str(tmp_path), LD_LIBRARY_PATH=str(tmp_path))
    if out.startswith("LOADED"):
        import pytest
        pytest.skip("a libssmstate is installed system-wide: " + out.strip())
    for what in ("SSMSTATE_LIBRARY: not set", "pkg-config --variable=libdir ssmstate",
                 "ctypes.util.find_library('ssmstate')", "libssmstate.so.0"):
        assert what in out, out


def test_library_in_use():
    path = ssmstate.library_path()
    assert os.path.basename(path).startswith("libssmstate.so")
    if os.environ.get("SSMSTATE_LIBRARY"):
        assert path == os.environ["SSMSTATE_LIBRARY"]
