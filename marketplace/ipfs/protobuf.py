"""The protobuf wire format, only as much as dag-pb and UnixFS need (varint and bytes fields)."""

from collections.abc import Iterator

from marketplace.ipfs import varint
from marketplace.ipfs.errors import InvalidBlock

VARINT = 0
LEN = 2


def key(field: int, wire_type: int) -> bytes:
    return varint.encode(field << 3 | wire_type)


def varint_field(field: int, value: int) -> bytes:
    return key(field, VARINT) + varint.encode(value)


def len_prefix(field: int, length: int) -> bytes:
    """The bytes before a length-delimited payload; callers join the payload themselves so a
    256 KiB chunk is copied once, into the finished block."""
    return key(field, LEN) + varint.encode(length)


def fields(buf: bytes | memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """Yield (field number, value) for each field: an int for a varint field, a zero-copy view
    for a length-delimited one."""
    view = memoryview(buf)
    pos = 0
    try:
        while pos < len(view):
            tag, pos = varint.decode(view, pos)
            field, wire_type = tag >> 3, tag & 7
            if wire_type == VARINT:
                value, pos = varint.decode(view, pos)
                yield field, value
            elif wire_type == LEN:
                length, pos = varint.decode(view, pos)
                if pos + length > len(view):
                    raise InvalidBlock("protobuf field runs past the end of the block")
                yield field, view[pos : pos + length]
                pos += length
            else:
                raise InvalidBlock(f"unexpected protobuf wire type {wire_type}")
    except varint.VarintError as exc:
        raise InvalidBlock(f"malformed protobuf: {exc}") from None
