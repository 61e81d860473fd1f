"""CUDA contexts driven with torch tensors: the same steps as a CPU context,
explicit streams, device pages, and a decode captured in a torch CUDA graph and
replayed against an uncaptured twin. Skipped without torch, a GPU, or a CUDA
build of the library."""
import numpy as np
import pytest

import ssmstate
from ssm_testlib import MODES, World, ini, rel_rms

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no GPU visible to torch", allow_module_level=True)

DEV = "cuda:0"
SHAPE = dict(heads=2, value_heads=4, key_dim=32, value_dim=32)


def cuda_ctx(make_ctx, mode="native", **kw):
    try:
        return make_ctx(ini(mode=mode, device="cuda", **dict(SHAPE, **kw)))
    except ssmstate.SsmError as e:
        if e.code == ssmstate.Status.ERR_CONFIG and "CUDA" in e.message:
            pytest.skip(f"library without CUDA: {e.message}")
        raise


def to_torch(a: np.ndarray, bf16: bool) -> "torch.Tensor":
    """A host array of the World onto the GPU (bf16 bits as torch.bfloat16)."""
    a = np.ascontiguousarray(a)
    if a.dtype == np.uint16 and bf16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(DEV)
    return torch.from_numpy(a).to(DEV)


def to_numpy(t: "torch.Tensor") -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(np.uint16)
    return t.cpu().numpy()


class GpuWorld:
    """The World's weights and inputs as torch tensors on the GPU."""

    def __init__(self, ctx, seed):
        self.host = World(ctx, seed, bind=False)
        self.ctx = ctx
        self.weights = [ctx.layer_weights(**{k: to_torch(v, False) for k, v in w.items()})
                        for w in self.host.weights]

    def io(self, host_inputs):
        return {k: to_torch(v, self.host.act_bf16) for k, v in host_inputs.items()}


@pytest.mark.parametrize("mode", MODES)
def test_cuda_steps_match_cpu(make_ctx, mode):
    gpu = cuda_ctx(make_ctx, mode, state="f32", act="bf16")
    cpu = make_ctx(ini(mode=mode, state="f32", act="bf16", **SHAPE))
    gw, cw = GpuWorld(gpu, 11), World(cpu, 11)
    rows, T = 2, 4
    gs = np.array([gpu.acquire() for _ in range(rows)], np.int32)
    cs = np.array([cpu.acquire() for _ in range(rows)], np.int32)
    offsets = np.array([0, 6, 17], np.int32)
    pre = cw.layer_inputs(int(offsets[-1]))
    gpre = [gw.io(p) for p in pre]
    gpb = gpu.prefill_batch(torch.from_numpy(gs).to(DEV), torch.from_numpy(offsets).to(DEV),
                            slots_host=gs, token_offsets_host=offsets)
    cpb = cpu.prefill_batch(cs, offsets)
    for layer in range(cpu.model.layers):
        cpu.prefill(layer, cpb, cw.bound[layer], pre[layer])
        gpu.prefill(layer, gpb, gw.weights[layer], gpre[layer])
    ver = cw.layer_inputs(rows * T)
    gver = [gw.io(v) for v in ver]
    gb = gpu.batch(torch.from_numpy(gs).to(DEV), tokens=T, slots_host=gs)
    cb = cpu.batch(cs, tokens=T)
    gt = ct = None
    for layer in range(cpu.model.layers):
        ct = cpu.verify(layer, cb, cw.bound[layer], ver[layer], ct)
        gt = gpu.verify(layer, gb, gw.weights[layer], gver[layer], gt)
    cpu.commit(ct, [3, 1])
    gpu.commit(gt, torch.tensor([3, 1], dtype=torch.int32, device=DEV))
    torch.cuda.synchronize()
    for host, dev in zip(pre + ver, gpre + gver):
        got, want = cw.load(to_numpy(dev["out"])), cw.load(host["out"])
        assert rel_rms(got, want) < 1e-2
    sh = gpu.model.canonical_shapes()
    L = gpu.model.layers
    conv = torch.zeros((L,) + sh["conv"], dtype=torch.bfloat16, device=DEV)
    state = torch.zeros((L,) + sh["state"], dtype=torch.float32, device=DEV)
    gpu.export_canonical(int(gs[1]), conv, state)
    torch.cuda.synchronize()
    c_conv, c_state = cpu.export_canonical(int(cs[1]))
    np.testing.assert_array_equal(to_numpy(conv), c_conv)  # the window is bit-exact
    assert rel_rms(state.cpu().numpy(), c_state) < 1e-3
    assert gpu.status().flags == 0


def test_host_tensors_are_refused(make_ctx):
    ctx = cuda_ctx(make_ctx)
    w = World(ctx, 1, bind=False)
    with pytest.raises(ssmstate.SsmError,
                       match=r"weights.conv_weight: in host memory, this context needs CUDA"):
        ctx.layer_weights(**w.weights[0])
    with pytest.raises(ssmstate.SsmError, match="batch.slots_host"):
        ctx.batch(torch.zeros(1, dtype=torch.int32, device=DEV))


def test_explicit_streams(make_ctx):
    ctx = cuda_ctx(make_ctx)
    gw = GpuWorld(ctx, 2)
    s = ctx.acquire()
    slots = np.array([s], np.int32)
    batch = ctx.batch(torch.from_numpy(slots).to(DEV), slots_host=slots)
    io = [ctx.step_io(**gw.io(gw.host.inputs(1))) for _ in range(ctx.model.layers)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    for handle in (stream, stream.cuda_stream):
        for layer in range(ctx.model.layers):
            ctx.decode(layer, batch, gw.weights[layer], io[layer], stream=handle)
    with torch.cuda.stream(stream):  # the current torch stream is the default
        for layer in range(ctx.model.layers):
            ctx.decode(layer, batch, gw.weights[layer], io[layer])
    stream.synchronize()
    assert ctx.status().flags == 0


def test_decode_captured_in_a_cuda_graph(make_ctx):
    """A decode of every layer captured once in a torch CUDA graph and replayed with
    new inputs gives, bit for bit, what an uncaptured twin computes."""
    a = cuda_ctx(make_ctx, "replay")
    b = cuda_ctx(make_ctx, "replay")
    wa, wb = GpuWorld(a, 5), GpuWorld(b, 5)
    rows, layers = 3, a.model.layers
    sa = np.array([a.acquire() for _ in range(rows)], np.int32)
    sb = np.array([b.acquire() for _ in range(rows)], np.int32)
    offsets = np.array([0, 4, 9, 16], np.int32)
    pre = wa.host.layer_inputs(16)
    for ctx, w, s in ((a, wa, sa), (b, wb, sb)):
        pb = ctx.prefill_batch(torch.from_numpy(s).to(DEV), torch.from_numpy(offsets).to(DEV),
                               slots_host=s, token_offsets_host=offsets)
        for layer in range(layers):
            ctx.prefill(layer, pb, w.weights[layer], w.io(pre[layer]))
    # static buffers, bound once
    static = [wa.io(wa.host.inputs(rows)) for _ in range(layers)]
    io_a = [a.step_io(**t) for t in static]
    batch_a = a.batch(torch.from_numpy(sa).to(DEV), slots_host=sa)
    twin = [{k: v.clone() for k, v in t.items()} for t in static]
    io_b = [b.step_io(**t) for t in twin]
    batch_b = b.batch(torch.from_numpy(sb).to(DEV), slots_host=sb)

    def step(ctx, batch, w, io):
        for layer in range(layers):
            ctx.decode(layer, batch, w.weights[layer], io[layer])

    side = torch.cuda.Stream()  # warm-up off the default stream, as torch asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(a, batch_a, wa, io_a)
        step(b, batch_b, wb, io_b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(a, batch_a, wa, io_a)  # captured, not run
    for _ in range(6):
        for layer in range(layers):
            new = wa.io(wa.host.inputs(rows))
            for k in ("x", "gate", "beta"):
                static[layer][k].copy_(new[k])
                twin[layer][k].copy_(new[k])
        graph.replay()
        step(b, batch_b, wb, io_b)
        torch.cuda.synchronize()
        for layer in range(layers):
            assert torch.equal(static[layer]["out"], twin[layer]["out"])
    for x, y in zip(sa, sb):
        pa, pb_ = a.export_page(int(x)), b.export_page(int(y))
        assert pa == pb_


def test_device_pages(make_ctx):
    src = cuda_ctx(make_ctx, "native")
    dst = cuda_ctx(make_ctx, "compact")
    gw = GpuWorld(src, 4)
    s = np.array([src.acquire(), src.acquire()], np.int32)
    offsets = np.array([0, 5, 12], np.int32)
    pb = src.prefill_batch(torch.from_numpy(s).to(DEV), torch.from_numpy(offsets).to(DEV),
                           slots_host=s, token_offsets_host=offsets)
    for layer in range(src.model.layers):
        src.prefill(layer, pb, gw.weights[layer], gw.io(gw.host.inputs(12)))
    stride = (src.page_bytes + 7) // 8 * 8
    pages = torch.zeros(2 * stride, dtype=torch.uint8, device=DEV)
    assert src.export_pages_device(list(s), pages) == stride
    status = torch.full((2,), -1, dtype=torch.int32, device=DEV)
    d = [dst.acquire(), dst.acquire()]
    dst.import_pages_device(d, pages, status)
    torch.cuda.synchronize()
    assert status.tolist() == [ssmstate.PageStatus.ACCEPTED] * 2
    host = pages.cpu().numpy().tobytes()
    for k in range(2):
        assert host[k * stride:k * stride + src.page_bytes] == src.export_page(int(s[k]))
        assert dst.export_page(d[k]) == src.export_page(int(s[k]))
