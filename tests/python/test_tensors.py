"""How array objects are read: NumPy's array interface, DLPack (read through
ctypes), the buffer protocol; dtype, contiguity and memory-space checks."""
import ctypes

import numpy as np
import pytest

import ssmstate
from ssm_testlib import World, ini


class DLPackOnly:
    """An array that speaks DLPack alone (as a torch CPU tensor does)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        try:
            return self._a.__dlpack__(**kwargs)
        except TypeError:  # NumPy without max_version
            kwargs.pop("max_version", None)
            return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


needs_dlpack = pytest.mark.skipif(not hasattr(np.ndarray, "__dlpack__"),
                                  reason="NumPy without DLPack")


def test_array_interface_is_used_in_place():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = ssmstate.view(a, "a")
    assert v.route == "__array_interface__" and v.device == "cpu"
    assert v.ptr == a.ctypes.data and v.shape == (3, 4) and v.dtype == ("f", 32)
    with pytest.raises(ssmstate.SsmError, match="a: not C-contiguous"):
        ssmstate.view(a.T, "a")
    assert ssmstate.view(a[1:], "a").ptr == a.ctypes.data + 16  # a contiguous slice: in place


@needs_dlpack
def test_dlpack_is_read_without_a_copy():
    a = np.arange(6, dtype=np.int32)
    v = ssmstate.view(DLPackOnly(a), "a")
    assert v.route.startswith("__dlpack__")
    assert v.ptr == a.ctypes.data and v.shape == (6,) and v.dtype == ("i", 32)
    assert ctypes.c_int32.from_address(v.ptr + 8).value == 2
    with pytest.raises(ssmstate.SsmError, match="not C-contiguous"):
        ssmstate.view(DLPackOnly(np.zeros((4, 4), np.float32)[:, :2]), "a")


@needs_dlpack
def test_steps_take_dlpack_tensors(make_ctx):
    ctx = make_ctx(ini())
    w = World(ctx, 9)
    s = ctx.acquire()
    ins = w.inputs(1)
    plain = {k: v.copy() for k, v in ins.items()}
    ctx.decode(0, ctx.batch(DLPackOnly(np.array([s], np.int32))), w.bound[0],
               {k: DLPackOnly(v) for k, v in ins.items()})
    twin = make_ctx(ini())
    t = twin.acquire()
    twin.decode(0, twin.batch([t]), World(twin, 9).bound[0], plain)
    np.testing.assert_array_equal(ins["out"], plain["out"])
    assert ins["out"].any()


def test_buffer_protocol():
    b = bytearray(b"abcd")
    v = ssmstate.view(b, "b")
    assert v.route == "buffer" and not v.readonly and v.nbytes == 4
    assert ctypes.string_at(v.ptr, 4) == b"abcd"
    r = ssmstate.view(b"xyz", "r")
    assert r.readonly and ctypes.string_at(r.ptr, 3) == b"xyz"


def test_bf16_helpers():
    x = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0], np.float32)
    bits = ssmstate.to_bf16(x)
    assert bits.dtype == np.uint16
    back = ssmstate.from_bf16(bits)
    assert np.all(np.abs(back - x) <= np.abs(x) * 2 ** -8)
    assert ssmstate.to_bf16(np.float32(1.0)) == 0x3F80
    # round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7
    assert ssmstate.to_bf16(np.float32(1 + 2 ** -8)) == 0x3F80


def test_bf16_context_takes_raw_bits(make_ctx):
    ctx = make_ctx(ini(act="bf16"))
    w = World(ctx)
    s = ctx.acquire()
    io = w.inputs(1)
    assert io["x"].dtype == np.uint16
    ctx.decode(0, ctx.batch([s]), w.bound[0], io)
    bad = dict(io, x=ssmstate.from_bf16(io["x"]))
    with pytest.raises(ssmstate.SsmError, match="io.x: dtype float32, expected bf16"):
        ctx.decode(0, ctx.batch([s]), w.bound[0], bad)


def test_stream_handles():
    class TorchLike:
        cuda_stream = 1234

    class CupyLike:
        ptr = 99
    assert ssmstate.stream_handle(7) == 7
    assert ssmstate.stream_handle(TorchLike()) == 1234
    assert ssmstate.stream_handle(CupyLike()) == 99
    assert ssmstate.stream_handle(None) is None
    with pytest.raises(ssmstate.SsmError, match="stream: str is not a stream"):
        ssmstate.stream_handle("default")
