"""Errors: tickets misused (each refusal is the library's own code and message),
and arguments refused before the C call, each naming the argument."""
import numpy as np
import pytest

import ssmstate
from ssm_testlib import MODES, World, ini

T = 3


def opened(ctx, w, slots, layers=None):
    """A forward verified on `layers` (all by default); returns its ticket."""
    batch = ctx.batch(np.array(slots, dtype=np.int32), tokens=T)
    ticket = None
    for layer in (range(ctx.model.layers) if layers is None else layers):
        ticket = ctx.verify(layer, batch, w.bound[layer], w.inputs(len(slots) * T), ticket)
    return batch, ticket


def code_of(excinfo):
    return excinfo.value.code


@pytest.mark.parametrize("mode", MODES)
def test_ticket_misuse(make_ctx, mode):
    ctx = make_ctx(ini(mode=mode))
    other = make_ctx(ini(mode=mode))
    w = World(ctx)
    s0, s1 = ctx.acquire(), ctx.acquire()

    # committed twice: repeated
    _, ticket = opened(ctx, w, [s0])
    ctx.commit(ticket, [2])
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.commit(ticket, [2])
    assert code_of(e) == ssmstate.Status.ERR_TICKET_REPEATED
    assert e.value.message  # ssm_last_error's text

    # an empty ticket, and another context's: foreign
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.commit(ssmstate.Ticket(), [1])
    assert code_of(e) == ssmstate.Status.ERR_TICKET_FOREIGN
    o = other.acquire()
    _, foreign = opened(other, World(other), [o])
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.commit(foreign, [1])
    assert code_of(e) == ssmstate.Status.ERR_TICKET_FOREIGN
    other.commit(foreign, [1])

    # a forged ticket (fields altered): foreign
    batch, ticket = opened(ctx, w, [s0])
    forged = ticket.copy()
    forged._c.forward += 1000
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.commit(forged, [1])
    assert code_of(e) == ssmstate.Status.ERR_TICKET_FOREIGN

    # a second forward over pending slots, a layer verified twice, a release while open
    with pytest.raises(ssmstate.SsmError) as e:
        opened(ctx, w, [s0])
    assert code_of(e) == ssmstate.Status.ERR_VERIFY_PENDING
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.verify(0, batch, w.bound[0], w.inputs(T), ticket)
    assert code_of(e) == ssmstate.Status.ERR_VERIFY_PENDING
    with pytest.raises(ssmstate.SsmError) as e:  # another slot buffer, the same slots
        ctx.verify(0, ctx.batch([s0], tokens=T), w.bound[0], w.inputs(T), ticket)
    assert code_of(e) == ssmstate.Status.ERR_INVALID_ARGUMENT
    assert "slot buffer" in e.value.message
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.release(s0)
    assert code_of(e) == ssmstate.Status.ERR_VERIFY_PENDING
    # accepted outside [1, T]: refused, the forward stays open
    for bad in ([0], [T + 1]):
        with pytest.raises(ssmstate.SsmError) as e:
            ctx.commit(ticket, bad)
        assert code_of(e) == ssmstate.Status.ERR_ACCEPTED_RANGE
    ctx.commit(ticket, [T])

    # committed before every layer was verified: incomplete
    _, partial = opened(ctx, w, [s1], layers=[0])
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.commit(partial, [1])
    assert code_of(e) == ssmstate.Status.ERR_TICKET_INCOMPLETE
    ctx.abort(partial)

    # an old ticket once its rows were verified again: stale
    _, first = opened(ctx, w, [s1])
    ctx.commit(first, [1])
    _, second = opened(ctx, w, [s1])
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.commit(first, [1])
    assert code_of(e) == ssmstate.Status.ERR_TICKET_STALE
    ctx.commit(second, [1])


def test_not_a_ticket(make_ctx):
    ctx = make_ctx(ini())
    with pytest.raises(ssmstate.SsmError, match="ticket must be a Ticket"):
        ctx.commit({"forward": 1}, [1])


def bad_call(ctx, w, **change):
    """A decode of one row with one tensor replaced; returns the error."""
    s = ctx.acquire()
    try:
        io = w.inputs(1)
        io.update({k: v for k, v in change.items() if k in io})
        weights = dict(w.weights[0])
        weights.update({k: v for k, v in change.items() if k in weights})
        slots = change.get("slots", np.array([s], dtype=np.int32))
        with pytest.raises(ssmstate.SsmError) as e:
            ctx.decode(0, ctx.batch(slots), weights, io)
        assert e.value.code == ssmstate.Status.ERR_INVALID_ARGUMENT
        return e.value.message
    finally:
        ctx.release(s)


def test_arguments_are_checked_before_the_call(make_ctx):
    ctx = make_ctx(ini())  # f32 activations
    w = World(ctx)
    m = ctx.model
    D = m.conv_channels
    assert "io.x: dtype float64, expected f32" in bad_call(ctx, w, x=np.zeros((1, D)))
    assert "io.gate: dtype uint16" in bad_call(ctx, w, gate=np.zeros((1, 4), np.uint16))
    msg = bad_call(ctx, w, beta=np.zeros(3, np.float32))
    assert "io.beta" in msg and "whole number of tokens" in msg
    msg = bad_call(ctx, w, x=np.zeros((2, 2 * D), np.float32)[:, ::2])
    assert "io.x: not C-contiguous" in msg
    ro = np.zeros(m.io_shapes(1)["out"], np.float32)
    ro.flags.writeable = False
    assert "io.out: read-only" in bad_call(ctx, w, out=ro)
    msg = bad_call(ctx, w, a_log=np.zeros(3, np.float32))
    assert "weights.a_log: 3 elements" in msg and "(4,)" in msg
    assert "weights.conv_weight: dtype float64" in bad_call(
        ctx, w, conv_weight=np.zeros(m.weight_shapes()["conv_weight"]))
    assert "batch.slots: dtype int64, expected int32" in bad_call(
        ctx, w, slots=np.array([0], dtype=np.int64))
    msg = bad_call(ctx, w, x=[1.0, 2.0])
    assert "io.x: list is not a usable array" in msg

    class OnDevice:  # a CUDA tensor, as far as the interface says
        __cuda_array_interface__ = {"shape": (1, D), "typestr": "<f4", "data": (1 << 20, False),
                                    "version": 3}
    msg = bad_call(ctx, w, x=OnDevice())
    assert "io.x: in CUDA device memory, this context needs host memory" in msg


def test_too_few_tokens(make_ctx):
    ctx = make_ctx(ini())
    w = World(ctx)
    s = [ctx.acquire(), ctx.acquire()]
    batch = ctx.batch(np.array(s, dtype=np.int32), tokens=T)
    with pytest.raises(ssmstate.SsmError, match=r"io holds 5 tokens, the batch needs 6 \(2 rows x 3\)"):
        ctx.verify(0, batch, w.bound[0], w.inputs(5))
    pb = ctx.prefill_batch(s, [0, 4, 9])
    with pytest.raises(ssmstate.SsmError, match="io holds 8 tokens, the batch needs 9"):
        ctx.prefill(0, pb, w.bound[0], w.inputs(8))
    with pytest.raises(ssmstate.SsmError, match="accepted holds 1 values, the forward has 2 rows"):
        ticket = None
        for layer in range(ctx.model.layers):
            ticket = ctx.verify(layer, batch, w.bound[layer], w.inputs(6), ticket)
        ctx.commit(ticket, [1])
    ctx.commit(ticket, [1, 1])


def test_library_errors_carry_the_message(make_ctx):
    ctx = make_ctx(ini())
    w = World(ctx)
    s = ctx.acquire()
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.decode(ctx.model.layers, ctx.batch([s]), w.bound[0], w.inputs(1))  # no such layer
    assert e.value.code == ssmstate.Status.ERR_INVALID_ARGUMENT
    assert "layer" in e.value.message
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.decode(0, ctx.batch([s, s]), w.bound[0], w.inputs(2))  # a slot twice
    assert e.value.code == ssmstate.Status.ERR_INVALID_ARGUMENT
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.decode(0, ctx.batch([3]), w.bound[0], w.inputs(1))  # not acquired
    assert e.value.code == ssmstate.Status.ERR_SLOT_NOT_ACQUIRED


def test_bound_objects_belong_to_their_context(make_ctx):
    a, b = make_ctx(ini()), make_ctx(ini())
    wa = World(a)
    s = b.acquire()
    with pytest.raises(ssmstate.SsmError, match="weights: bound to another context"):
        b.decode(0, b.batch([s]), wa.bound[0], wa.inputs(1))
    with pytest.raises(ssmstate.SsmError, match="batch must be a Batch of this context"):
        b.decode(0, a.batch([0]), wa.weights[0], wa.inputs(1))
