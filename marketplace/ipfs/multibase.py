"""The multibase encodings CIDs are written in: base58btc (`z`, CIDv0), base32 (`b`), base16."""

import base64

from marketplace.ipfs.errors import InvalidCid

_B58_ALPHABET = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {c: i for i, c in enumerate(_B58_ALPHABET)}


def b58encode(data: bytes) -> str:
    """Bitcoin base58, the alphabet of CIDv0 and peer IDs."""
    zeros = len(data) - len(data.lstrip(b"\0"))
    num = int.from_bytes(data, "big")
    out = bytearray()
    while num:
        num, rem = divmod(num, 58)
        out.append(_B58_ALPHABET[rem])
    return (b"1" * zeros + bytes(reversed(out))).decode()


def b58decode(text: str) -> bytes:
    raw = text.encode()
    num = 0
    for char in raw:
        if char not in _B58_INDEX:
            raise InvalidCid(f"invalid base58 character {chr(char)!r}")
        num = num * 58 + _B58_INDEX[char]
    zeros = len(raw) - len(raw.lstrip(b"1"))
    body = num.to_bytes((num.bit_length() + 7) // 8, "big") if num else b""
    return b"\0" * zeros + body


def b32encode(data: bytes) -> str:
    """RFC 4648 base32, lower case without padding: the default for CIDv1."""
    return base64.b32encode(data).decode().rstrip("=").lower()


def b32decode(text: str) -> bytes:
    padded = text.upper() + "=" * (-len(text) % 8)
    try:
        return base64.b32decode(padded)
    except ValueError as exc:  # binascii.Error, or a character outside ASCII
        raise InvalidCid(f"invalid base32: {exc}") from None


def encode(data: bytes, prefix: str = "b") -> str:
    """Encode with a multibase prefix character."""
    if prefix == "b":
        return "b" + b32encode(data)
    if prefix == "z":
        return "z" + b58encode(data)
    if prefix == "f":
        return "f" + data.hex()
    raise InvalidCid(f"unsupported multibase prefix {prefix!r}")


def decode(text: str) -> bytes:
    """Decode a multibase string by its prefix character."""
    if not text:
        raise InvalidCid("empty multibase string")
    prefix, body = text[0], text[1:]
    if prefix in "bB":
        return b32decode(body)
    if prefix == "z":
        return b58decode(body)
    if prefix in "fF":
        try:
            return bytes.fromhex(body)
        except ValueError:
            raise InvalidCid("invalid base16") from None
    raise InvalidCid(f"unsupported multibase prefix {prefix!r}")
