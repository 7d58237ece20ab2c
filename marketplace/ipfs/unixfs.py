"""UnixFS, the file layer inside dag-pb nodes: type, inline data, file size, child block sizes."""

from dataclasses import dataclass, field

from marketplace.ipfs import protobuf
from marketplace.ipfs.errors import InvalidBlock

RAW, DIRECTORY, FILE, METADATA, SYMLINK, HAMT_SHARD = range(6)


@dataclass(slots=True)
class Data:
    type: int
    data: bytes | None = None
    filesize: int | None = None
    blocksizes: list[int] = field(default_factory=list)


def encode_parts(type_: int, data: bytes | memoryview | None, filesize: int,
                 blocksizes: list[int]) -> list[bytes | memoryview]:
    """The UnixFS message as parts to join, so file data is not copied twice. Field order
    and presence match go-unixfs: Data only when non-empty, filesize always."""
    parts: list[bytes | memoryview] = [protobuf.varint_field(1, type_)]
    if data:
        parts += [protobuf.len_prefix(2, len(data)), data]
    parts.append(protobuf.varint_field(3, filesize))
    parts += [protobuf.varint_field(4, size) for size in blocksizes]
    return parts


def decode(buf: bytes | memoryview) -> Data:
    """Decode a UnixFS message; mode, mtime, hash type and fanout are read past."""
    result = Data(type=-1)
    for number, wire_type, value in protobuf.fields(buf):
        if number == 1 and wire_type == protobuf.VARINT:
            result.type = value
        elif number == 2 and wire_type == protobuf.LEN:
            result.data = bytes(value)
        elif number == 3 and wire_type == protobuf.VARINT:
            result.filesize = value
        elif number == 4 and wire_type == protobuf.VARINT:
            result.blocksizes.append(value)
    if result.type not in range(6):
        raise InvalidBlock("UnixFS data without a valid type")
    return result
