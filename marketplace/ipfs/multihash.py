"""Multihash: self-describing digests, and checking bytes against them."""

import hashlib
from collections.abc import Callable, Sequence

from marketplace.ipfs import varint
from marketplace.ipfs.errors import HashMismatch, InvalidCid

SHA2_256 = 0x12

Buffer = bytes | bytearray | memoryview

# code -> (name, digest length, hash constructor); identity is handled apart because its
# "digest" is the data itself.
_HASHES: dict[int, tuple[str, int, Callable]] = {
    SHA2_256: ("sha2-256", 32, hashlib.sha256),
    0x13: ("sha2-512", 64, hashlib.sha512),
}
IDENTITY = 0x00
_NAMES = {name: code for code, (name, _, _) in _HASHES.items()}


def code_for(name: str) -> int:
    """The multihash code of a hash named as Kubo names it (`sha2-256`)."""
    try:
        return _NAMES[name]
    except KeyError:
        raise InvalidCid(f"unsupported hash function {name!r}") from None


def name_for(code: int) -> str:
    try:
        return _HASHES[code][0]
    except KeyError:
        raise InvalidCid(f"unsupported multihash code 0x{code:x}") from None


def new(code: int):
    """A fresh incremental hasher for `code` (hashlib object)."""
    try:
        return _HASHES[code][2]()
    except KeyError:
        raise InvalidCid(f"unsupported multihash code 0x{code:x}") from None


def wrap(code: int, digest: bytes) -> bytes:
    return varint.encode(code) + varint.encode(len(digest)) + digest


def digest(parts: Sequence[Buffer], code: int = SHA2_256) -> bytes:
    """The multihash of the concatenation of `parts` under hash function `code`; a block is
    hashed from the buffers it arrived in, without joining them first."""
    hasher = new(code)
    for part in parts:
        hasher.update(part)
    return wrap(code, hasher.digest())


def split(mh: bytes) -> tuple[int, bytes]:
    """(code, digest) of a multihash, checking its declared length."""
    try:
        code, pos = varint.decode(mh)
        length, pos = varint.decode(mh, pos)
    except varint.VarintError as exc:
        raise InvalidCid(f"malformed multihash: {exc}") from None
    body = mh[pos:]
    if len(body) != length:
        raise InvalidCid(f"multihash length {length} does not match its {len(body)} digest bytes")
    if code != IDENTITY:
        if code not in _HASHES:
            raise InvalidCid(f"unsupported multihash code 0x{code:x}")
        if length != _HASHES[code][1]:
            raise InvalidCid(f"truncated digests are not supported (0x{code:x}, {length} bytes)")
    return code, body


def verify(mh: bytes, data: bytes | memoryview) -> None:
    """Raise HashMismatch unless `data` hashes to the multihash `mh`."""
    code, expected = split(mh)
    if code == IDENTITY:
        actual = bytes(data)
    else:
        hasher = new(code)
        hasher.update(data)
        actual = hasher.digest()
    if actual != expected:
        raise HashMismatch("bytes do not hash to the expected multihash")
