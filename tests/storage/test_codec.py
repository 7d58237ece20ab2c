"""Unit tests of the codecs: varints, multibase, CIDs, dag-pb and UnixFS."""

import pytest

from marketplace.ipfs import car, dagpb, multibase, unixfs, varint
from marketplace.ipfs.cid import CID, DAG_PB, RAW
from marketplace.ipfs.errors import HashMismatch, InvalidBlock, InvalidCid

from .support import EMPTY_RAW_CID

HELLO_V0 = "QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN"  # `echo hello | ipfs add`
# The start of the CARv1 example the IPLD CAR libraries test against: a header with two
# dag-cbor roots, then raw blocks "aaaa", "bbbb" and "cccc".
CARV1_EXAMPLE = bytes.fromhex(
    "63a265726f6f747382d82a58250001711220f88bc853804cf294fe417e4fa83028689fcdb1b1592c5102e147"
    "4dbc200fab8bd82a5825000171122069ea0740f9807a28f4d932c62e7c1c83be055e55072c90266ab3e79df6"
    "3a365b6776657273696f6e01280155122061be55a8e2f6b4e172338bddf184d6dbee29c98853e0a0485ecee7"
    "f27b9af0b461616161280155122081cc5b17018674b401b42f35ba07bb79e211239c23bffe658da1577e3e64"
    "6877626262622801551220b6fbd675f98e2abd22d4ed29fdc83150fedc48597e92dd1a7a24381d44a2745163"
    "636363"
)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63 - 1])
def test_varint_roundtrip(value):
    encoded = varint.encode(value)
    assert varint.decode(encoded) == (value, len(encoded))


def test_varint_truncated_is_refused():
    with pytest.raises(ValueError):
        varint.decode(b"\x80\x80")


@pytest.mark.parametrize("data", [b"", b"\0\0ab", bytes(range(256))])
def test_base58_roundtrip_keeps_leading_zeros(data):
    assert multibase.b58decode(multibase.b58encode(data)) == data


@pytest.mark.parametrize("prefix", ["b", "z", "f"])
def test_multibase_roundtrip(prefix):
    data = b"\x01\x70\x12\x20" + bytes(32)
    assert multibase.decode(multibase.encode(data, prefix)) == data


def test_cid_v0_and_v1_name_the_same_block():
    v0 = CID.parse(HELLO_V0)
    v1 = v0.to_v1()
    assert str(v1).startswith("bafybei")
    assert CID.parse(str(v1)) == v1
    assert v1.multihash == v0.multihash
    assert str(CID.parse(str(v0))) == HELLO_V0


def test_cid_of_empty_raw_block_matches_the_well_known_cid():
    assert str(CID.of(b"", RAW)) == EMPTY_RAW_CID


def test_cid_parse_accepts_ipfs_paths_and_other_bases():
    v1 = CID.parse(HELLO_V0).to_v1()
    assert CID.parse(f"/ipfs/{HELLO_V0}") == CID.parse(HELLO_V0)
    assert CID.parse("z" + multibase.b58encode(bytes(v1))) == v1
    assert CID.parse("f" + bytes(v1).hex()) == v1


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello",
        "Qm123",
        "bafy!!!",
        f"{HELLO_V0}/file",
        "b" + multibase.b32encode(b"\x02\x70\x12\x20" + bytes(32)),
        "b" + multibase.b32encode(b"\x01\x70\x12\x20" + bytes(31)),
    ],
)
def test_invalid_cids_are_refused_with_the_input_in_the_message(text):
    with pytest.raises(InvalidCid, match="invalid CID"):
        CID.parse(text)


def test_verify_detects_a_flipped_byte():
    cid = CID.of(b"checkpoint", RAW)
    cid.verify(b"checkpoint")
    with pytest.raises(HashMismatch):
        cid.verify(b"checkpoinT")


def test_dagpb_roundtrip_with_links_and_data():
    child = CID.of(b"leaf", RAW)
    data = unixfs.encode_parts(unixfs.FILE, [], 4, [4])
    block = b"".join(dagpb.encode([dagpb.Link(child, "", 4)], data))
    node = dagpb.decode(block)
    assert node.links == [dagpb.Link(child, "", 4)]
    meta = unixfs.decode(node.data)
    assert (meta.type, meta.filesize, meta.blocksizes) == (unixfs.FILE, 4, [4])


def test_empty_file_node_is_kubos_bytes():
    block = b"".join(dagpb.encode([], unixfs.encode_parts(unixfs.FILE, [], 0, [])))
    assert block == b"\x0a\x04\x08\x02\x18\x00"
    assert str(CID.of(block, DAG_PB, 0)) == "QmbFMke1KXqnYyBBWxB74N4c5SBnJMVAiMNRcGu6x1AwQH"


@pytest.mark.parametrize(
    "block", [b"\x0a\x05\x08", b"\x1a\x00", b"\x0a\x00\x12\x00", b"\x12\x02\x0a\x00"]
)
def test_malformed_dagpb_is_refused(block):
    with pytest.raises(InvalidBlock):
        dagpb.decode(block)


def test_car_header_and_sections_match_the_carv1_example():
    roots = [
        CID.decode(bytes.fromhex("01711220" + digest))
        for digest in (
            "f88bc853804cf294fe417e4fa83028689fcdb1b1592c5102e1474dbc200fab8b",
            "69ea0740f9807a28f4d932c62e7c1c83be055e55072c90266ab3e79df63a365b",
        )
    ]
    blocks = [b"aaaa", b"bbbb", b"cccc"]
    encoded = car.header(roots) + b"".join(
        car.section_head(CID.of(block, RAW), block) + block for block in blocks
    )
    assert encoded == CARV1_EXAMPLE
