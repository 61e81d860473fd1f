"""Prefill, MTP verify, commit and decode through every mode on the CPU, against a
float64 NumPy reference and against each other (the modes agree bit for bit on
the same device)."""
import numpy as np
import pytest

import ssmstate
from ssm_testlib import MODES, World, ini, reference, rel_rms

PROMPTS = [5, 9, 1]
T = 4
ACCEPTED = [2, 4, 1]


def run_steps(ctx: ssmstate.Context, seed: int = 7):
    """Three requests: a prompt each (one prefill call), one verify round of T = 4 with
    ACCEPTED kept, then one decode. Returns the world, inputs and every output."""
    w = World(ctx, seed)
    m = ctx.model
    rows = len(PROMPTS)
    slots = np.array([ctx.acquire() for _ in range(rows)], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(PROMPTS)]).astype(np.int32)
    pre = w.layer_inputs(int(offsets[-1]))
    pb = ctx.prefill_batch(slots, offsets)
    for layer in range(m.layers):
        ctx.prefill(layer, pb, w.bound[layer], ctx.step_io(**pre[layer]))
    ver = w.layer_inputs(rows * T)
    batch = ctx.batch(slots, tokens=T)
    ticket = None
    for layer in range(m.layers):
        ticket = ctx.verify(layer, batch, w.bound[layer], ctx.step_io(**ver[layer]), ticket)
    assert (ticket.rows, ticket.tokens) == (rows, T) and not ticket.empty
    ctx.commit(ticket, np.array(ACCEPTED, dtype=np.int32))
    dec = w.layer_inputs(rows)
    one = ctx.batch(slots)  # tokens = 1
    for layer in range(m.layers):
        ctx.decode(layer, one, w.weights[layer], ctx.step_io(**dec[layer]))  # raw weights too
    finals = [ctx.export_canonical(int(s)) for s in slots]
    return w, slots, offsets, pre, ver, dec, finals


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind,lower_bound", [("gdn", None), ("kda", None), ("kda", -5.0)])
@pytest.mark.parametrize("dtypes", [("f32", "f32"), ("bf16", "bf16")])
def test_against_reference(make_ctx, mode, kind, lower_bound, dtypes):
    state, act = dtypes
    ctx = make_ctx(ini(mode=mode, kind=kind, lower_bound=lower_bound, state=state, act=act))
    w, slots, offsets, pre, ver, dec, finals = run_steps(ctx)
    m = ctx.model
    bound = 1e-4 if dtypes == ("f32", "f32") else 2e-2
    L = w.load
    for layer in range(m.layers):
        for r in range(len(PROMPTS)):
            a, b = offsets[r], offsets[r + 1]
            def tokens(d, lo, hi, name):
                return L(d[layer][name]).reshape(-1, *m.io_shapes(1)[name][1:])[lo:hi]
            stream = {n: np.concatenate([tokens(pre, a, b, n),
                                         tokens(ver, r * T, r * T + ACCEPTED[r], n),
                                         tokens(dec, r, r + 1, n)])
                      for n in ("x", "gate", "beta")}
            ref_out, ref_state, ref_window = reference(m, w.weights[layer], **stream)
            out = np.concatenate([tokens(pre, a, b, "out"),
                                  tokens(ver, r * T, r * T + ACCEPTED[r], "out"),
                                  tokens(dec, r, r + 1, "out")])
            assert rel_rms(out, ref_out) < bound, (layer, r)
            # every verified token, kept or not, against the draft stream
            draft = {n: np.concatenate([tokens(pre, a, b, n), tokens(ver, r * T, r * T + T, n)])
                     for n in ("x", "gate", "beta")}
            ref_draft = reference(m, w.weights[layer], **draft)[0][-T:]
            assert rel_rms(tokens(ver, r * T, r * T + T, "out"), ref_draft) < bound
            conv, st = finals[r]
            state_f = ssmstate.from_bf16(st[layer]) if state == "bf16" else st[layer]
            assert rel_rms(state_f, ref_state) < bound, (layer, r)
            np.testing.assert_array_equal(L(conv[layer]), ref_window)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_modes_agree_bit_for_bit(make_ctx, kind):
    results = {}
    for mode in MODES:
        ctx = make_ctx(ini(mode=mode, kind=kind, state="bf16", act="bf16"))
        _, _, _, pre, ver, dec, finals = run_steps(ctx, seed=3)
        results[mode] = ([d["out"] for d in pre + ver + dec], finals)
    native_out, native_finals = results["native"]
    for mode in ("compact", "replay"):
        out, finals = results[mode]
        for a, b in zip(out, native_out):
            np.testing.assert_array_equal(a, b, err_msg=mode)
        for (ca, sa), (cb, sb) in zip(finals, native_finals):
            np.testing.assert_array_equal(ca, cb, err_msg=mode)
            np.testing.assert_array_equal(sa, sb, err_msg=mode)


@pytest.mark.parametrize("mode", MODES)
def test_slots_released_and_reused(make_ctx, mode):
    """A released slot comes back fresh: the same request served again in it gives
    the outputs of a first run."""
    ctx = make_ctx(ini(mode=mode, max_requests=1))
    w = World(ctx, 5)
    inputs = w.layer_inputs(6)
    runs = []
    for _ in range(2):
        s = ctx.acquire()
        pb = ctx.prefill_batch([s], [0, 6])
        outs = []
        for layer in range(ctx.model.layers):
            io = dict(inputs[layer], out=np.zeros_like(inputs[layer]["out"]))
            ctx.prefill(layer, pb, w.bound[layer], io)
            outs.append(io["out"])
        runs.append(outs)
        ctx.release(s)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_padding_rows_are_skipped(make_ctx):
    ctx = make_ctx(ini())
    w = World(ctx, 2)
    s = ctx.acquire()
    slots = np.array([-1, s], dtype=np.int32)
    ins = w.inputs(2 * T)
    ins["out"][:] = 7.0
    ticket = None
    batch = ctx.batch(slots, tokens=T)
    for layer in range(ctx.model.layers):
        ticket = ctx.verify(layer, batch, w.bound[layer], ins, ticket)
    ctx.commit(ticket, [1, 3])  # a list is fine on a CPU context
    assert np.all(ins["out"][:T] == 7.0)  # the padding row's outputs are not written
    assert not np.all(ins["out"][T:] == 7.0)


def test_abort_makes_slots_fresh(make_ctx):
    ctx = make_ctx(ini())
    w = World(ctx, 4)
    s = ctx.acquire()
    pb = ctx.prefill_batch([s], [0, 3])
    for layer in range(ctx.model.layers):
        ctx.prefill(layer, pb, w.bound[layer], w.inputs(3))
    batch = ctx.batch([s], tokens=2)
    ticket = ctx.verify(0, batch, w.bound[0], w.inputs(2))
    ctx.abort(ticket)
    conv, state = ctx.export_canonical(s)
    assert not conv.any() and not state.any()
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.commit(ticket, [1])
    assert e.value.code == ssmstate.Status.ERR_TICKET_STALE


@pytest.mark.parametrize("mode", MODES)
def test_slot_copy(make_ctx, mode):
    ctx = make_ctx(ini(mode=mode))
    w = World(ctx, 6)
    a, b = ctx.acquire(), ctx.acquire()
    pb = ctx.prefill_batch([a], [0, 7])
    for layer in range(ctx.model.layers):
        ctx.prefill(layer, pb, w.bound[layer], w.inputs(7))
    ctx.slot_copy(a, b)
    ca, sa = ctx.export_canonical(a)
    cb, sb = ctx.export_canonical(b)
    np.testing.assert_array_equal(ca, cb)
    np.testing.assert_array_equal(sa, sb)
    assert sa.any()


def test_bound_buffers_are_reused_across_steps(make_ctx):
    """Engines bind max-size buffers once and lower `rows`; slot numbers are written
    into the bound array in place."""
    ctx = make_ctx(ini(max_requests=4))
    w = World(ctx, 8)
    slots = np.full(4, -1, dtype=np.int32)
    io = [ctx.step_io(**w.inputs(4)) for _ in range(ctx.model.layers)]
    batch = ctx.batch(slots)
    assert batch.rows == 4
    got = [ctx.acquire(), ctx.acquire()]
    slots[:2] = got
    batch.rows = 2
    for _ in range(3):
        for layer in range(ctx.model.layers):
            ctx.decode(layer, batch, w.bound[layer], io[layer])
    with pytest.raises(ssmstate.SsmError, match="rows = 5"):
        batch.rows = 5
