"""CARv1: a DAG's blocks as one stream, as the trustless gateway sends them for ?format=car."""

from collections.abc import Iterator

from marketplace.ipfs import reader, varint
from marketplace.ipfs.cid import CID
from marketplace.ipfs.limits import DEFAULT_WALK_LIMITS, WalkLimits

MEDIA_TYPE = "application/vnd.ipld.car"
# What stream() sends, named as the trustless gateway spec names it.
CONTENT_TYPE = f"{MEDIA_TYPE}; version=1; order=dfs; dups=n"

_UINT, _BYTES, _TEXT, _ARRAY, _MAP = 0, 2, 3, 4, 5
_CID_TAG = b"\xd8\x2a"  # CBOR tag 42: a CID in dag-cbor


def _head(major: int, value: int) -> bytes:
    """A CBOR item head in the shortest form, which dag-cbor requires."""
    if value < 24:
        return bytes([major << 5 | value])
    if value < 0x100:
        return bytes([major << 5 | 24, value])
    return bytes([major << 5 | 25]) + value.to_bytes(2, "big")


def _text(text: str) -> bytes:
    raw = text.encode()
    return _head(_TEXT, len(raw)) + raw


def header(roots: list[CID]) -> bytes:
    """The length-prefixed dag-cbor map {"roots": [...], "version": 1}, keys in dag-cbor's
    canonical order; a binary CID in dag-cbor carries a leading zero byte."""
    body = bytearray(_head(_MAP, 2) + _text("roots") + _head(_ARRAY, len(roots)))
    for root in roots:
        raw = b"\x00" + bytes(root)
        body += _CID_TAG + _head(_BYTES, len(raw)) + raw
    body += _text("version") + _head(_UINT, 1)
    return varint.encode(len(body)) + bytes(body)


def section_head(cid: CID, block: bytes) -> bytes:
    """What goes before a block: the section's length, then the block's binary CID."""
    raw = bytes(cid)
    return varint.encode(len(raw) + len(block)) + raw


def stream(
    root: CID, get_block: reader.GetBlock, limits: WalkLimits = DEFAULT_WALK_LIMITS
) -> Iterator[bytes]:
    """The DAG under `root`: the header, then every block once, depth-first from the root (the
    order Kubo's gateway sends); `get_block` verifies each against its CID."""
    yield header([root])
    for cid, block in reader.iter_blocks(root, get_block, limits):
        if block is None:  # a raw leaf: the walk does not read what has no links
            block = get_block(cid)
        yield section_head(cid, block)
        yield block
