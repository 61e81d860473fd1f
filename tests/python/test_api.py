"""Contexts, configs, plans, plugins, the slot pool and errors, on the CPU."""
import os

import pytest

import ssmstate
from ssm_testlib import MODES, ini

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
QUICKSTART = os.path.join(TOP, "examples", "quickstart.ini")


def test_from_file_and_config():
    with ssmstate.Context.from_file(QUICKSTART) as ctx:
        c = ctx.config
        assert c.mode == "native" and c.device == "cpu"
        assert c.state_dtype == "f32" and c.activation_dtype == "bf16"
        assert c.max_requests == 4 and c.max_draft_tokens == 3
        assert c.prefill_precision == "high"  # the default
        m = ctx.model
        assert (m.kind, m.layers, m.heads, m.value_heads, m.key_dim, m.value_dim,
                m.conv_width) == ("gdn", 2, 2, 4, 32, 32, 4)
        assert m.conv_channels == 2 * 2 * 32 + 4 * 32
        assert m.io_shapes(3)["out"] == (3, 4, 32)
        assert ctx.plugin_path.endswith("native.so")
        assert not ctx.is_cuda and not ctx.closed
    assert ctx.closed
    ctx.close()  # twice is fine
    with pytest.raises(ssmstate.SsmError, match="closed"):
        ctx.acquire()


@pytest.mark.parametrize("mode", MODES)
def test_plan_matches_context(make_ctx, mode):
    text = ini(mode=mode)
    ctx = make_ctx(text)
    p = ctx.plan()
    assert p == ssmstate.plan(text=text)
    assert p.capacity == 4
    assert p.bytes_per_slot == (p.state_bytes_per_slot + p.conv_bytes_per_slot
                                + p.scratch_bytes_per_slot)
    assert p.pool_bytes == p.capacity * p.bytes_per_slot + p.shared_bytes
    assert ctx.config.source == "<string>"


def test_plan_of_file():
    assert ssmstate.plan(QUICKSTART).capacity == 4
    with pytest.raises(ssmstate.SsmError):
        ssmstate.plan(QUICKSTART, text="x")


def test_plugins_lists_the_three_modes():
    found = {p.name: p for p in ssmstate.plugins()}
    for mode in MODES:
        assert mode in found, f"{mode} not in {sorted(found)}"
        assert found[mode].ok and found[mode].abi_version >= 1
        assert os.path.isfile(found[mode].path)


def test_config_error_names_the_line():
    text = ini().replace("layers = 2", "layers = 12x")
    with pytest.raises(ssmstate.SsmError) as e:
        ssmstate.Context.from_string(text, source="engine.ini")
    assert e.value.code == ssmstate.Status.ERR_CONFIG
    assert e.value.name == "SSM_ERR_CONFIG"
    assert e.value.message.startswith("engine.ini:3:"), e.value.message
    assert "layers" in e.value.message
    assert "ssmstate-" not in e.value.message  # the temporary file is never named


def test_prefill_precision_is_read():
    with ssmstate.Context.from_string(ini(extra="prefill_precision = fast\n")) as ctx:
        assert ctx.config.prefill_precision == "fast"


def test_missing_file():
    with pytest.raises(ssmstate.SsmError) as e:
        ssmstate.Context.from_file("/nonexistent/x.ini")
    assert e.value.code == ssmstate.Status.ERR_CONFIG
    assert "cannot open config file" in e.value.message


def test_unknown_mode_is_a_plugin_error(make_ctx):
    with pytest.raises(ssmstate.SsmError) as e:
        make_ctx(ini(mode="nosuchmode"))
    assert e.value.code == ssmstate.Status.ERR_PLUGIN
    assert "nosuchmode" in e.value.message


def test_relative_plugin_dir_is_taken_from_the_cwd(tmp_path, monkeypatch):
    plugin_dir = os.path.dirname(ssmstate.plugins()[0].path)
    monkeypatch.chdir(tmp_path)
    rel = os.path.relpath(plugin_dir, str(tmp_path))
    text = ini().replace("max_draft_tokens = 3", f"max_draft_tokens = 3\nplugin_dir = {rel}")
    with ssmstate.Context.from_string(text) as ctx:
        assert ctx.config.plugin_dir == os.path.join(str(tmp_path), rel)
        assert os.path.samefile(os.path.dirname(ctx.plugin_path), plugin_dir)


@pytest.mark.parametrize("mode", MODES)
def test_pool(make_ctx, mode):
    ctx = make_ctx(ini(mode=mode, max_requests=3))
    assert ctx.pool() == (3, 0, 3)
    slots = [ctx.acquire() for _ in range(3)]
    assert sorted(slots) == [0, 1, 2]
    assert ctx.pool() == ssmstate.PoolStats(capacity=3, used=3, free=0)
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.acquire()
    assert e.value.code == ssmstate.Status.ERR_POOL_EXHAUSTED
    ctx.release(slots[1])
    assert ctx.pool().free == 1
    assert ctx.acquire() == slots[1]  # reused, fresh
    ctx.reset(slots[0])
    ctx.release(slots[2])
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.release(slots[2])
    assert e.value.code == ssmstate.Status.ERR_SLOT_NOT_ACQUIRED
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.reset(99)
    assert e.value.code == ssmstate.Status.ERR_SLOT_RANGE


def test_status_and_flags(make_ctx):
    ctx = make_ctx(ini())
    s = ctx.acquire()
    assert ctx.status() == (0, 0, -1)
    assert ctx.slot_flags(s) == ssmstate.Flag(0)
    assert ctx.tune() == (0, 0, 0, 0, 0, 0)  # a CPU context tunes nothing
    assert ctx.tune_report().tuned == 0


def test_status_names():
    assert ssmstate.status_name(11) == "SSM_ERR_TICKET_STALE"
    e = ssmstate.SsmError(13, "x")
    assert e.code is ssmstate.Status.ERR_TICKET_REPEATED and str(e) == "SSM_ERR_TICKET_REPEATED: x"
