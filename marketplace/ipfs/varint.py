"""Unsigned LEB128 varints, as used by multiformats and protobuf."""

from marketplace.ipfs.errors import IpfsError


class VarintError(IpfsError, ValueError):
    """A truncated or overlong varint."""


# Every protobuf key and many lengths are one byte: taken from this table rather than built in
# a loop. An internal node of a file (one per 174 leaves added) encodes some 1,700 varints.
_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def encode(value: int) -> bytes:
    """Encode a non-negative integer."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        raise VarintError(f"varints are unsigned, got {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode the varint at `pos`; return (value, position after it)."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise VarintError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise VarintError("varint longer than 9 bytes")
