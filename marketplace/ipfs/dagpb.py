"""The dag-pb codec: PBNode {Links, Data} in the canonical encoding Kubo hashes."""

from dataclasses import dataclass

from marketplace.ipfs import protobuf
from marketplace.ipfs.cid import CID
from marketplace.ipfs.errors import InvalidBlock, InvalidCid
from marketplace.ipfs.multihash import Buffer


@dataclass(frozen=True, slots=True)
class Link:
    cid: CID
    name: str
    tsize: int  # cumulative size of the linked DAG: its block plus everything below it


@dataclass(frozen=True, slots=True)
class Node:
    links: list[Link]
    data: bytes | None


def encode(links: list[Link], data_parts: list[Buffer] | None) -> list[Buffer]:
    """Encode a node as consecutive buffers (join them for the block's bytes); links first,
    then data, as the dag-pb spec orders them. Name and Tsize are always written (an empty
    name too), which is what go-merkledag does and so what Kubo's CIDs are computed over."""
    parts: list[Buffer] = []
    for link in links:
        hash_bytes = bytes(link.cid)
        name = link.name.encode()
        body = (
            protobuf.len_prefix(1, len(hash_bytes))
            + hash_bytes
            + protobuf.len_prefix(2, len(name))
            + name
            + protobuf.varint_field(3, link.tsize)
        )
        parts += [protobuf.len_prefix(2, len(body)), body]
    if data_parts is not None:
        parts.append(protobuf.len_prefix(1, sum(len(p) for p in data_parts)))
        parts += data_parts
    return parts


def decode(block: bytes | memoryview) -> Node:
    """Decode a dag-pb block, refusing fields the format does not have."""
    links: list[Link] = []
    data = None
    for field, value in protobuf.fields(block):
        if field == 2 and isinstance(value, memoryview):
            if data is not None:
                raise InvalidBlock("dag-pb links must come before data")
            links.append(_decode_link(value))
        elif field == 1 and isinstance(value, memoryview):
            data = bytes(value)
        else:
            raise InvalidBlock(f"unexpected dag-pb field {field}")
    return Node(links, data)


def _decode_link(buf: memoryview) -> Link:
    cid, name, tsize = None, "", 0
    for field, value in protobuf.fields(buf):
        if field == 1 and isinstance(value, memoryview):
            try:
                cid = CID.decode(bytes(value))
            except InvalidCid as exc:
                raise InvalidBlock(f"dag-pb link with a bad CID: {exc}") from None
        elif field == 2 and isinstance(value, memoryview):
            name = bytes(value).decode("utf-8", "replace")
        elif field == 3 and isinstance(value, int):
            tsize = value
        else:
            raise InvalidBlock(f"unexpected dag-pb link field {field}")
    if cid is None:
        raise InvalidBlock("dag-pb link without a hash")
    return Link(cid, name, tsize)
