#!/usr/bin/env python3
"""Writes a state page from docs/pages.md alone (an implementation independent of core/pages/page.c):
a small GDN model (layers 2, H 1, HV 2, K 8, V 8, W 4, f32 state and activations), values from a
fixed sequence. Usage: make_page.py OUT [spoil], spoil one of: none, payload (a flipped payload
byte), header (a flipped header byte), version (format version 2 with valid checksums), truncated,
trailing (8 bytes after the payload), and headers with valid checksums that describe no page:
reserved (byte 86 set), lower_bound (has_lower_bound 1 on this gdn model), value_heads (3 value
heads over 2 key heads).
"""
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def main():
    out, spoil = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "none"
    kind, layers, H, HV, K, V, W = 1, 2, 1, 2, 8, 8, 4
    D = 2 * H * K + HV * V
    values = [((i * 37) % 101 - 50) / 64.0 for i in range(layers * ((W - 1) * D + HV * V * K))]
    payload = struct.pack("<%df" % len(values), *values)
    version = 2 if spoil == "version" else 1
    # offsets 8..83: version, header bytes, writer's version, kind, layers, H, HV, K, V, W,
    # has_lower_bound, lower_bound, state dtype, activation dtype, h0, h1, payload bytes and CRC
    has_lower_bound, lower_bound = (1, 0xC0A00000) if spoil == "lower_bound" else (0, 0)  # -5.0
    heads, value_heads = (2, 3) if spoil == "value_heads" else (H, HV)
    head = b"SSMPAGE\0" + struct.pack("<16IQI", version, 96, 0x000100, kind, layers, heads,
                                      value_heads, K, V, W, has_lower_bound, lower_bound, 1, 1, 0,
                                      HV, len(payload), crc32c(payload))
    head += b"\0\0\1\0\0\0\0\0" if spoil == "reserved" else b"\0" * 8  # reserved, 84..91
    head += struct.pack("<I", crc32c(head))
    assert len(head) == 96, len(head)
    page = bytearray(head + payload)
    if spoil == "payload":
        page[96 + 13] ^= 0x04
    elif spoil == "header":
        page[40] ^= 0x01
    elif spoil == "truncated":
        page = page[:-8]
    elif spoil == "trailing":
        page += b"\0" * 8
    with open(out, "wb") as f:
        f.write(page)


if __name__ == "__main__":
    main()
