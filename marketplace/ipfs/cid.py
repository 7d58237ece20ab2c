"""Content identifiers (CIDv0 and CIDv1) as Kubo writes and parses them."""

from collections.abc import Sequence
from dataclasses import dataclass

from marketplace.ipfs import multibase, multihash, varint
from marketplace.ipfs.errors import InvalidCid
from marketplace.ipfs.multihash import SHA2_256, Buffer

DAG_PB = 0x70
RAW = 0x55
CODEC_NAMES = {DAG_PB: "dag-pb", RAW: "raw"}
CODECS = {name: code for code, name in CODEC_NAMES.items()}
# A CID of a 64-byte digest is about 110 characters in any base this node reads; "/ipfs/" aside.
MAX_CID_CHARS = 256


@dataclass(frozen=True, slots=True)
class CID:
    """A CID: version, codec and multihash. Blocks are stored by multihash, so a CIDv0 and a
    CIDv1 of the same bytes name the same block."""

    version: int
    codec: int
    multihash: bytes

    def __post_init__(self) -> None:
        if self.version == 0 and (self.codec != DAG_PB or self.multihash[:2] != b"\x12\x20"):
            raise InvalidCid("a CIDv0 is always dag-pb with a sha2-256 multihash")
        if self.version not in (0, 1):
            raise InvalidCid(f"unsupported CID version {self.version}")

    @classmethod
    def of(cls, data: Buffer, codec: int, version: int = 1, hash_code: int = SHA2_256) -> "CID":
        """The CID of `data`: what a block's bytes are named by."""
        return cls.of_parts([data], codec, version, hash_code)

    @classmethod
    def of_parts(
        cls, parts: Sequence[Buffer], codec: int, version: int = 1, hash_code: int = SHA2_256
    ) -> "CID":
        """The CID of a block given as consecutive buffers."""
        return cls(version, codec, multihash.digest(parts, hash_code))

    @classmethod
    def parse(cls, text: str) -> "CID":
        """Parse a CID string, or an `/ipfs/<cid>` path that names exactly one CID."""
        try:
            return cls._parse(text.strip())
        except InvalidCid as exc:
            raise InvalidCid(f"invalid CID {text!r}: {exc}") from None

    @classmethod
    def _parse(cls, text: str) -> "CID":
        if len(text) > MAX_CID_CHARS:  # base58 decodes in quadratic time: bound it first
            raise InvalidCid(f"longer than {MAX_CID_CHARS} characters")
        if text.startswith("/ipfs/"):
            text = text[len("/ipfs/") :].rstrip("/")
        if "/" in text:
            raise InvalidCid(f"{text!r}: paths inside a DAG are not supported, give a CID")
        if len(text) == 46 and text.startswith("Qm"):
            return cls._checked(0, DAG_PB, multibase.b58decode(text))
        return cls.decode(multibase.decode(text))

    @classmethod
    def decode(cls, raw: bytes) -> "CID":
        """Parse binary CID bytes (as found in dag-pb links)."""
        if len(raw) == 34 and raw[:2] == b"\x12\x20":
            return cls._checked(0, DAG_PB, raw)
        try:
            version, pos = varint.decode(raw)
            codec, pos = varint.decode(raw, pos)
        except varint.VarintError as exc:
            raise InvalidCid(f"malformed CID: {exc}") from None
        if version != 1:
            raise InvalidCid(f"unsupported CID version {version}")
        return cls._checked(1, codec, raw[pos:])

    @classmethod
    def _checked(cls, version: int, codec: int, mh: bytes) -> "CID":
        multihash.split(mh)
        return cls(version, codec, bytes(mh))

    def __bytes__(self) -> bytes:
        if self.version == 0:
            return self.multihash
        return varint.encode(1) + varint.encode(self.codec) + self.multihash

    def __str__(self) -> str:
        if self.version == 0:
            return multibase.b58encode(self.multihash)
        return multibase.encode(bytes(self), "b")

    def to_v1(self) -> "CID":
        return CID(1, self.codec, self.multihash)

    def verify(self, data: bytes | memoryview) -> None:
        """Raise HashMismatch unless `data` is this CID's block."""
        multihash.verify(self.multihash, data)
