"""A minimal ICC v2 RGB display profile (matrix and gamma curves), written out byte by
byte, for the tests of ICC conversion: Pillow can only make sRGB, LAB and XYZ profiles."""

from __future__ import annotations

import struct

#: sRGB's primaries as the ICC connection space (D50) sees them.
SRGB_RED = (0.4361, 0.2225, 0.0139)
SRGB_GREEN = (0.3851, 0.7169, 0.0971)
SRGB_BLUE = (0.1431, 0.0606, 0.7141)
D50 = (0.9642, 1.0, 0.8249)


def _s15(value: float) -> bytes:
    return struct.pack(">i", round(value * 65536))


def _xyz(x: float, y: float, z: float) -> bytes:
    return b"XYZ " + bytes(4) + _s15(x) + _s15(y) + _s15(z)


def _gamma(gamma: float) -> bytes:
    return b"curv" + bytes(4) + struct.pack(">IH", 1, round(gamma * 256)) + bytes(2)


def rgb_profile(red, green, blue, gamma: float = 2.2) -> bytes:
    """An RGB profile with these primaries (XYZ, D50) and one gamma for every channel."""
    tags = [
        (b"wtpt", _xyz(*D50)),
        (b"rXYZ", _xyz(*red)),
        (b"gXYZ", _xyz(*green)),
        (b"bXYZ", _xyz(*blue)),
        (b"rTRC", _gamma(gamma)),
        (b"gTRC", _gamma(gamma)),
        (b"bTRC", _gamma(gamma)),
    ]
    start = 128 + 4 + 12 * len(tags)
    table, data = b"", b""
    for signature, body in tags:
        table += signature + struct.pack(">II", start + len(data), len(body))
        data += body + bytes(-len(body) % 4)
    header = (
        struct.pack(">I", start + len(data))
        + bytes(4)
        + struct.pack(">I", 0x02100000)  # version 2.1
        + b"mntrRGB XYZ "  # a display profile, RGB data, XYZ connection space
        + bytes(12)
        + b"acsp"
        + bytes(28)
        + _s15(D50[0])
        + _s15(D50[1])
        + _s15(D50[2])
        + bytes(48)
    )
    return header + struct.pack(">I", len(tags)) + table + data


#: A profile whose red and blue primaries are swapped: pure red in it is sRGB's blue.
SWAPPED_PROFILE = rgb_profile(SRGB_BLUE, SRGB_GREEN, SRGB_RED)
