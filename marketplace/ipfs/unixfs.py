"""UnixFS, the file layer inside dag-pb nodes: type, inline data, file size, child block sizes."""

from collections.abc import Sequence
from dataclasses import dataclass, field

from marketplace.ipfs import protobuf
from marketplace.ipfs.errors import InvalidBlock
from marketplace.ipfs.multihash import Buffer

RAW, DIRECTORY, FILE, METADATA, SYMLINK, HAMT_SHARD = range(6)


@dataclass(slots=True)
class Data:
    type: int
    data: bytes | None = None
    filesize: int | None = None
    blocksizes: list[int] = field(default_factory=list)


def encode_parts(
    type_: int, data: Sequence[Buffer], filesize: int, blocksizes: list[int]
) -> list[Buffer]:
    """The UnixFS message as consecutive buffers, file data (itself given as buffers) left
    uncopied. Field order and presence match go-unixfs: Data only when non-empty, filesize
    always."""
    parts: list[Buffer] = [protobuf.varint_field(1, type_)]
    data_size = sum(len(part) for part in data)
    if data_size:
        parts += [protobuf.len_prefix(2, data_size), *data]
    parts.append(protobuf.varint_field(3, filesize))
    parts += [protobuf.varint_field(4, size) for size in blocksizes]
    return parts


def decode(buf: bytes | memoryview) -> Data:
    """Decode a UnixFS message; mode, mtime, hash type and fanout are read past."""
    result = Data(type=-1)
    for number, value in protobuf.fields(buf):
        if number == 1 and isinstance(value, int):
            result.type = value
        elif number == 2 and isinstance(value, memoryview):
            result.data = bytes(value)
        elif number == 3 and isinstance(value, int):
            result.filesize = value
        elif number == 4 and isinstance(value, int):
            result.blocksizes.append(value)
    if result.type not in range(6):
        raise InvalidBlock("UnixFS data without a valid type")
    return result
