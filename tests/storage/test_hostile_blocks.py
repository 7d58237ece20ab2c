"""The IPFS node's parsers of bytes anyone may send, fed what hypothesis makes up: a block for
dag-pb and UnixFS, a CID string, a multipart body cut into any pieces. Each returns a value or
raises the node's own error (an IpfsError, a 4xx), never anything else."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marketplace.ipfs import dagpb, unixfs
from marketplace.ipfs.cid import CID
from marketplace.ipfs.errors import IpfsError
from marketplace.ipfs.importer import FileImporter
from marketplace.ipfs.multipart import MultipartReader

FAST = settings(max_examples=500, deadline=2_000, suppress_health_check=list(HealthCheck))


def a_file_node() -> bytes:
    """The root block of a small file of two leaves, as `ipfs add` makes it."""
    blocks: list[bytes] = []

    def keep(parts, codec, version):
        blocks.append(b"".join(bytes(p) for p in parts))
        return CID.of_parts(parts, codec, version)

    importer = FileImporter(keep, chunk_size=1024)
    importer.write(bytes(range(256)) * 8)
    importer.finish()
    return blocks[-1]


ROOT = a_file_node()


def mutated(document: bytes):
    return st.one_of(
        st.integers(0, len(document)).map(lambda n: document[:n]),
        st.lists(st.tuples(st.integers(0, len(document) - 1), st.integers(1, 255)), min_size=1).map(
            lambda flips: bytes(_flip(bytearray(document), flips))
        ),
    )


def _flip(out: bytearray, flips) -> bytearray:
    for at, mask in flips:
        out[at] ^= mask
    return out


@FAST
@given(st.binary(max_size=300) | mutated(ROOT))
def test_any_block_is_a_dag_pb_node_or_refused(block):
    try:
        node = dagpb.decode(block)
    except IpfsError:
        return
    if node.data is not None:
        try:
            unixfs.decode(node.data)
        except IpfsError:
            pass


@FAST
@given(st.binary(max_size=300))
def test_any_bytes_are_unixfs_data_or_refused(data):
    try:
        unixfs.decode(data)
    except IpfsError:
        pass


@FAST
@given(st.text(max_size=120) | st.sampled_from([str(CID.of_parts([ROOT], 0x70, 1))]).map(str))
def test_any_text_is_a_cid_or_refused(text):
    try:
        CID.parse(text)
    except IpfsError:
        pass


BOUNDARY = b"zoo-boundary-0123456789"
BODY = (
    b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n'
    b"Content-Type: application/octet-stream\r\n\r\n"
    + bytes(range(256)) * 4
    + b"\r\n--"
    + BOUNDARY
    + b"--\r\n"
)


@FAST
@given(
    st.binary(max_size=600) | mutated(BODY),
    st.lists(st.integers(1, 300), min_size=1, max_size=20),
)
def test_any_body_in_any_pieces_is_multipart_or_refused(body, cuts):
    async def pieces():
        at = 0
        for size in cuts * (len(body) // sum(cuts) + 1):
            if at >= len(body):
                return
            yield body[at : at + size]
            at += size

    async def read() -> None:
        async for part in MultipartReader(pieces(), BOUNDARY).parts():
            async for _ in part.chunks():
                pass

    try:
        asyncio.run(read())
    except IpfsError:
        pass
