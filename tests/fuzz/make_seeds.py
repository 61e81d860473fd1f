#!/usr/bin/env python3
"""Writes the seed corpora of the fuzzing harnesses (tests/fuzz/corpus/<harness>/) from
docs/pages.md and the harnesses' input formats alone: config = the INI files of examples/ plus a
few edge cases; page = a flags byte, a page of each model the page harness's contexts hold (and a
trailer choosing a slice, or a second page to merge); step = short programs of step calls in
each mode. Usage: make_seeds.py SRCDIR (the tree holding examples/ and tests/fuzz/)."""
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from make_page import crc32c  # noqa: E402  (tests/make_page.py: the page format's CRC32C)


def values(dtype, n, seed):
    xs = [((i * 37 + seed * 11) % 101 - 50) / 64.0 for i in range(n)]
    if dtype == 1:
        return struct.pack("<%df" % n, *xs)
    return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", x))[0] >> 16) for x in xs)


def page(kind, layers, H, HV, K, V, W, sd, ad, h0=None, h1=None, lb=None):
    """A page of value heads [h0, h1) of the model (all of them by default)."""
    h0, h1 = (0 if h0 is None else h0), (HV if h1 is None else h1)
    group = HV // H
    hv, h = h1 - h0, (h1 - h0) // group
    D = 2 * h * K + hv * V
    size = {1: 4, 2: 2}
    payload = b""
    for layer in range(layers):
        payload += values(ad, (W - 1) * D, layer) + values(sd, hv * V * K, layer + 7)
    lb_bits = struct.unpack("<I", struct.pack("<f", lb or 0.0))[0]
    head = b"SSMPAGE\0" + struct.pack("<16IQI", 1, 96, 0x000100, kind, layers, H, HV, K, V, W,
                                      1 if lb else 0, lb_bits, sd, ad, h0, h1, len(payload),
                                      crc32c(payload))
    head += b"\0" * 8
    head += struct.pack("<I", crc32c(head))
    assert len(head) == 96 and len(payload) == layers * ((W - 1) * D * size[ad] + hv * V * K * size[sd])
    return head + payload


def step_programs():
    """Programs for fuzz_step.c: byte 0 picks mode (% 3), KDA (4), bf16 state (8), bf16
    activations (16); then ops. Slots are written + 1 (the harness reads b % 7 - 1)."""
    def s(v):
        return v + 1
    acquire = [0]
    def prefill(layer, rows, lens, max_row=7):
        return [3, layer + 1, len(rows), max_row + 1] + [s(v) for v in rows] + lens
    def verify_open(rec, layer, rows, tokens):
        return [5, rec, layer + 1, len(rows), tokens] + [s(v) for v in rows]
    def verify(rec, layer):
        return [5, rec, layer + 1]
    def commit(rec, acc):
        return [6, rec, 0] + acc + [1] * (6 - len(acc))
    base = acquire * 3 + prefill(0, [0, 1, 2], [3, 5, 1]) + prefill(1, [0, 1, 2], [3, 5, 1])
    round_ = verify_open(0, 0, [0, -1, 2], 4) + verify(0, 1) + commit(0, [2, 1, 4])
    decode = [4, 1, 0, 3, s(2), s(0), s(1), 4, 2, 0, 3, s(2), s(0), s(1)]
    out = {}
    for setup in (0, 1, 2, 4 | 8, 5 | 16, 6 | 8 | 16):
        out["session-%02x" % setup] = bytes([setup] + base + round_ + decode + [11, s(0), 14])
    # tickets misused: a commit before every layer, a tampered ticket, a changed buffer,
    # an abort, a repeated commit; and a NaN input flagged
    out["tickets"] = bytes([0] + base + verify_open(1, 0, [1, 0], 3) + commit(1, [1, 1]) +
                           [8, 1, 1, 1] + verify(1, 1) + [8, 1, 1, 0xFF] + verify(1, 1) +
                           [10, 1, 0, s(2)] + commit(1, [1, 1]) + [10, 1, 0, s(1)] +
                           commit(1, [1, 1]) + [7, 1, 9, 1] + verify_open(1, 0, [0], 2) +
                           [7, 1, 7, 1, 13, 0, 3] + decode + [14, 12, s(0), s(3), 2, s(0)])
    out["slots"] = bytes([2] + acquire * 5 + [1, s(1), 1, s(1), 0, 2, s(3), 1, 0xF8, 12, s(0),
                                              s(2), 4, 1, 0, 3, s(2), s(2), s(-1)])
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "."
    top = os.path.join(src, "tests", "fuzz", "corpus")
    for sub in ("config", "page", "step"):
        os.makedirs(os.path.join(top, sub), exist_ok=True)
    ex = os.path.join(src, "examples")
    for name in sorted(os.listdir(ex)):
        if name.endswith(".ini"):
            shutil.copyfile(os.path.join(ex, name), os.path.join(top, "config", name))
    with open(os.path.join(ex, "quickstart.ini"), "rb") as f:
        quick = f.read()
    edge = {
        "crlf-bom.ini": b"\xef\xbb\xbf" + quick.replace(b"\n", b"\r\n"),
        "kda-rank.ini": b"[model]\nkind = kda\nlayers = 1\nheads = 2\nvalue_heads = 4\n"
                        b"key_dim = 8\nvalue_dim = 8\nconv_width = 2\nlower_bound = -5.0\n"
                        b"model_heads = 4\nmodel_value_heads = 8\nfirst_value_head = 4\n"
                        b"[state]\nmode = compact\nstate_dtype = bf16\nactivation_dtype = fp32\n"
                        b"max_requests = 1048576\nmax_draft_tokens = 15\nplugin_dir = rel/dir\n"
                        b"[compact]\n[workload]\nseed = 18446744073709551615\nacceptance = 1e-3\n",
        # [workload] is text to the library; the command's reader refuses this one
        "workload-text.ini": quick.replace(b"acceptance = 0.7", b"acceptance = 0x1p-1")
                                  .replace(b"seed = 42", b"seeds = 42"),
        "max-dims.ini": b"[model]\nkind: gdn\nlayers: 4096\nheads: 1024\nvalue_heads: 1024\n"
                        b"key_dim: 1024\nvalue_dim: 1024\nconv_width: 16\n[state]\nmode: native\n"
                        b"state_dtype: f32\nmax_requests: 1048576\nmax_draft_tokens: 15\n",
    }
    for name, text in edge.items():
        with open(os.path.join(top, "config", name), "wb") as f:
            f.write(text)
    gdn = page(1, 2, 1, 2, 8, 8, 4, 1, 1)            # tests/make_page.py's model
    whole = page(1, 1, 2, 4, 4, 4, 3, 2, 1)          # the rank context's whole model
    low = page(1, 1, 2, 4, 4, 4, 3, 2, 1, 0, 2)      # its other rank
    high = page(1, 1, 2, 4, 4, 4, 3, 2, 1, 2, 4)
    kda = page(2, 1, 1, 2, 4, 4, 2, 2, 2, lb=-5.0)   # the bounded KDA context's
    pages = {
        "gdn-f32": b"\0" + gdn,
        "gdn-f32-fix": b"\1" + gdn[:100] + b"\x7f" + gdn[101:],
        "rank-whole-slice": b"\0" + whole + bytes([0, 1, 3, 1]),
        "rank-whole-slice2": b"\0" + whole + bytes([6, 3, 5, 2]),
        "rank-merge": b"\0" + high + bytes([0, 0, 3, 0]) + low,
        "kda-bf16": b"\0" + kda + bytes([0, 1, 3, 0]),
        "bad-version": b"\0" + gdn[:8] + b"\2" + gdn[9:],
        "truncated": b"\0" + gdn[:-8],
    }
    for name, data in pages.items():
        with open(os.path.join(top, "page", name), "wb") as f:
            f.write(data)
    for name, data in step_programs().items():
        with open(os.path.join(top, "step", name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
