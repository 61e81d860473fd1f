"""State pages through Python: bytes round trips across modes, batches, headers,
corruption, tensor-parallel slices and merges, device pages refused on the CPU."""
import numpy as np
import pytest

import ssmstate
from ssm_testlib import MODES, World, ini


def filled(ctx, seed=1, tokens=(5, 8)):
    """Slots prefilled with random prompts (same seed, same states in any mode)."""
    w = World(ctx, seed)
    slots = [ctx.acquire() for _ in tokens]
    offsets = np.concatenate([[0], np.cumsum(tokens)]).astype(np.int32)
    pb = ctx.prefill_batch(np.array(slots, np.int32), offsets)
    for layer in range(ctx.model.layers):
        ctx.prefill(layer, pb, w.bound[layer], w.inputs(int(offsets[-1])))
    return w, slots


@pytest.mark.parametrize("src_mode", MODES)
@pytest.mark.parametrize("dst_mode", MODES)
def test_page_round_trip_across_modes(make_ctx, src_mode, dst_mode):
    src = make_ctx(ini(mode=src_mode, state="bf16", act="bf16"))
    dst = make_ctx(ini(mode=dst_mode, state="bf16", act="bf16"))
    _, slots = filled(src)
    page = src.export_page(slots[1])
    assert isinstance(page, bytes) and len(page) == src.page_bytes == dst.page_bytes
    info = ssmstate.inspect_page(page)
    assert info.page_bytes == len(page) and info.format_version == 1
    assert info.model == src.model and info.state_dtype == "bf16"
    assert (info.head_first, info.head_end) == (0, src.model.value_heads)
    assert ssmstate.read_page_header(page[:96]) == info
    d = dst.acquire()
    dst.import_page(d, bytearray(page))  # any bytes-like
    for a, b in zip(src.export_canonical(slots[1]), dst.export_canonical(d)):
        np.testing.assert_array_equal(a, b)
    assert dst.export_page(d) == page


def test_batched_pages(make_ctx):
    src = make_ctx(ini(mode="replay"))
    dst = make_ctx(ini(mode="native"))
    _, slots = filled(src, tokens=(3, 9, 4))
    pages = src.export_pages(slots)
    assert pages == [src.export_page(s) for s in slots]
    got = [dst.acquire() for _ in slots]
    dst.import_pages(got, pages)
    assert dst.export_pages(got) == pages
    # one buffer with a stride
    stride = src.page_bytes + 64
    buf = bytearray(stride * len(pages))
    for i, p in enumerate(pages):
        buf[i * stride:i * stride + len(p)] = p
    again = [dst.acquire()]
    dst.import_pages(again, np.frombuffer(bytes(buf[:stride]), np.uint8), stride=stride)
    assert dst.export_page(again[0]) == pages[0]


def test_corrupt_pages_are_refused(make_ctx):
    ctx = make_ctx(ini())
    _, slots = filled(ctx)
    page = bytearray(ctx.export_page(slots[0]))
    page[-1] ^= 0x40  # payload
    with pytest.raises(ssmstate.SsmError) as e:
        ssmstate.inspect_page(page)
    assert e.value.code == ssmstate.Status.ERR_PAGE_INVALID
    assert ssmstate.read_page_header(page).page_bytes == len(page)  # the header is sound
    with pytest.raises(ssmstate.SsmError) as e:
        ssmstate.inspect_page(bytes(page) + b"\0")  # bytes after the payload
    assert e.value.code == ssmstate.Status.ERR_PAGE_INVALID
    before = ctx.export_page(slots[1])
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.import_page(slots[1], page)
    assert e.value.code == ssmstate.Status.ERR_PAGE_INVALID
    assert "checksum" in e.value.message
    assert ctx.export_page(slots[1]) == before  # unchanged
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.import_page(slots[1], b"SSMPAGE")
    assert e.value.code in (ssmstate.Status.ERR_PAGE_INVALID,
                            ssmstate.Status.ERR_INVALID_ARGUMENT)
    other = make_ctx(ini(key_dim=8))  # another model
    s = other.acquire()
    with pytest.raises(ssmstate.SsmError) as e:
        other.import_page(s, before)
    assert e.value.code == ssmstate.Status.ERR_PAGE_INVALID


def test_slices_and_merge(make_ctx):
    whole = make_ctx(ini(heads=2, value_heads=4))
    _, slots = filled(whole)
    page = whole.export_page(slots[0])
    group = whole.model.value_heads // whole.model.heads
    parts = [ssmstate.slice_page(page, h, h + group) for h in (2, 0)]
    assert [ssmstate.inspect_page(p)[5:7] for p in parts] == [(2, 4), (0, 2)]
    assert ssmstate.merge_pages(parts) == page
    with pytest.raises(ssmstate.SsmError) as e:
        ssmstate.slice_page(page, 1, 2)  # off the group
    assert e.value.code == ssmstate.Status.ERR_INVALID_ARGUMENT


def test_device_pages_need_a_cuda_context(make_ctx):
    ctx = make_ctx(ini())
    _, slots = filled(ctx)
    buf = np.zeros(2 * ((ctx.page_bytes + 7) // 8 * 8), np.uint8)
    with pytest.raises(ssmstate.SsmError) as e:
        ctx.export_pages_device(slots, buf)
    assert e.value.code == ssmstate.Status.ERR_UNSUPPORTED
    with pytest.raises(ssmstate.SsmError, match="pages holds 8 bytes"):
        ctx.export_pages_device(slots, np.zeros(8, np.uint8))


def test_export_canonical_into_caller_buffers(make_ctx):
    ctx = make_ctx(ini(state="bf16"))
    _, slots = filled(ctx)
    m = ctx.model
    sh = m.canonical_shapes()
    conv = [np.zeros(sh["conv"], np.float32) for _ in range(m.layers)]
    state = np.zeros((m.layers,) + sh["state"], np.uint16)
    got = ctx.export_canonical(slots[0], conv, state)
    assert got[0] is conv and got[1] is state
    ref_conv, ref_state = ctx.export_canonical(slots[0])
    np.testing.assert_array_equal(np.stack(conv), ref_conv)
    np.testing.assert_array_equal(state, ref_state)
    with pytest.raises(ssmstate.SsmError, match="state: dtype float32, expected bf16"):
        ctx.export_canonical(slots[0], conv, state.astype(np.float32))
    with pytest.raises(ssmstate.SsmError, match="conv: 1 tensors"):
        ctx.export_canonical(slots[0], conv[:1], state)
