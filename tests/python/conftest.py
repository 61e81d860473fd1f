"""pytest set-up: the package from this source tree, and contexts closed after each test.

Run by tests/python/run_pytest.sh under `make check`, which points
SSMSTATE_LIBRARY and SSMSTATE_PLUGIN_PATH at the build tree; by hand:
  SSMSTATE_LIBRARY=BUILD/.libs/libssmstate.so.0 SSMSTATE_PLUGIN_PATH=BUILD/.libs \
      python3 -m pytest tests/python
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

import ssmstate  # noqa: E402


@pytest.fixture
def make_ctx():
    """make_ctx(ini_text) -> Context, closed when the test ends."""
    made = []

    def make(text: str) -> ssmstate.Context:
        ctx = ssmstate.Context.from_string(text)
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx.close()
