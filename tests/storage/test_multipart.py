"""The streaming multipart reader, fed the same body cut at every size around its delimiters."""

import asyncio

import pytest

from marketplace.ipfs.multipart import MalformedMultipart, MultipartReader, boundary_of

BOUNDARY = b"0123456789abcdef"


def body(*files: tuple[str, bytes]) -> bytes:
    parts = [
        b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="file"; '
        b'filename="' + name.encode() + b'"\r\n\r\n' + data + b"\r\n"
        for name, data in files
    ]
    return b"".join(parts) + b"--" + BOUNDARY + b"--\r\n"


def parse(raw: bytes, piece: int) -> list[tuple[str, bytes]]:
    async def stream():
        for start in range(0, len(raw), piece):
            yield raw[start : start + piece]

    async def run():
        found = []
        async for part in MultipartReader(stream(), BOUNDARY).parts():
            found.append((part.filename, b"".join([bytes(c) async for c in part.chunks()])))
        return found

    return asyncio.run(run())


# Data that looks like the delimiter's start, so a cut inside it must not end the part.
TRICKY = b"x\r\n--0123456789abcdeX\r\n-" + bytes(range(256)) * 3


@pytest.mark.parametrize("piece", [*range(1, 40), 97, 4096])
def test_every_cut_gives_the_same_parts(piece: int):
    files = [("a%20b.bin", TRICKY), ("empty", b""), ("c", b"\r\n--")]
    assert parse(body(*files), piece) == [("a b.bin", TRICKY), ("empty", b""), ("c", b"\r\n--")]


@pytest.mark.parametrize(
    "raw",
    [
        body(("f", b"data"))[:-20],
        b"no delimiter at all",
        b"--" + BOUNDARY + b"\r\nno end of headers",
    ],
)
def test_truncated_bodies_are_refused(raw: bytes):
    with pytest.raises(MalformedMultipart):
        parse(raw, 7)


@pytest.mark.parametrize("content_type", [None, "application/json", "multipart/form-data"])
def test_content_type_must_carry_a_boundary(content_type):
    with pytest.raises(MalformedMultipart):
        boundary_of(content_type)


def test_boundary_is_read_quoted_or_not():
    assert boundary_of('multipart/form-data; boundary="abc"') == b"abc"
    assert boundary_of("multipart/form-data; boundary=abc") == b"abc"
