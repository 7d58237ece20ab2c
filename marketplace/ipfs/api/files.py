"""RPC routes for files: add (streamed import), cat and get."""

import asyncio
import json
import logging
import os
import tarfile
from collections import deque
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from marketplace.ipfs import multipart, reader
from marketplace.ipfs.api.deps import BodyDep, CidDep, RepoDep
from marketplace.ipfs.api.streaming import EventStream, FileStream
from marketplace.ipfs.blockstore import Blockstore
from marketplace.ipfs.cid import CID
from marketplace.ipfs.errors import Unsupported
from marketplace.ipfs.importer import BlockSink, Child, FileImporter, Imported, parse_chunker
from marketplace.ipfs.pinstore import RECURSIVE
from marketplace.ipfs.repo import Repo

log = logging.getLogger(__name__)

router = APIRouter(tags=["files"])

# Bytes received before their complete chunks go to a worker, and how many such batches may
# wait for the workers: the receive loop runs ahead of storing by at most about 10 MiB.
_BATCH_BYTES = 2 * 1024 * 1024
_MAX_IN_FLIGHT = 4
# Threads storing one add's leaves beside the event loop, which stores batches too when they
# are behind. Hashing and file writes release the GIL, so each thread can keep a core busy;
# more than a few would only hold more of the body in memory.
_WORKERS = max(1, min(4, (os.cpu_count() or 1) - 1))
_GC_WAIT_S = 0.05


class AddOptions(BaseModel):
    """`ipfs add` flags, named as Kubo names them on the wire."""

    model_config = ConfigDict(populate_by_name=True)

    cid_version: int = Field(0, alias="cid-version", ge=0, le=1)
    raw_leaves: bool | None = Field(
        None, alias="raw-leaves", description="default: true with cid-version=1, as in Kubo"
    )
    chunker: str | None = Field(None, description="size-<bytes>, default size-262144")
    pin: bool = True
    only_hash: bool = Field(False, alias="only-hash")
    progress: bool = Field(False, description="stream the bytes imported so far, as Kubo does")
    hash: str = Field("sha2-256", description="only sha2-256")
    trickle: bool = False
    wrap_with_directory: bool = Field(False, alias="wrap-with-directory")
    nocopy: bool = False
    inline: bool = False

    def check_supported(self) -> None:
        """Refuse what this node cannot honour before any of the body is read."""
        for flag in ("trickle", "wrap_with_directory", "nocopy", "inline"):
            if getattr(self, flag):
                raise Unsupported(f"{flag.replace('_', '-')} is not supported by this node")
        if self.hash != "sha2-256":
            raise Unsupported(f"hash {self.hash!r} is not supported, only sha2-256")
        parse_chunker(self.chunker)

    def importer(self, sink: BlockSink) -> FileImporter:
        raw_leaves = self.raw_leaves if self.raw_leaves is not None else self.cid_version == 1
        return FileImporter(
            sink,
            chunk_size=parse_chunker(self.chunker),
            cid_version=self.cid_version,
            raw_leaves=raw_leaves,
        )


def _store(importer: FileImporter, chunks: list[list[memoryview]]) -> list[Child]:
    return [importer.leaf(chunk) for chunk in chunks]


async def _import(
    part: multipart.Part, options: AddOptions, store: Blockstore | None
) -> AsyncIterator[int | Imported]:
    """Receive on the event loop and cut the stream into chunks there, while worker threads
    hash and store batches of chunks as leaf blocks (hashlib and file writes release the
    GIL, so the workers and the loop run on all cores). A chunk is hashed and written by one
    thread, one straight after the other, while its bytes are still in that core's cache.
    When the workers are _MAX_IN_FLIGHT batches behind, the loop stores the next batch
    itself rather than wait for them: waiting, it would idle, and a worker would have to
    wake it (an eventfd write and a hand-over of the GIL per batch). The loop links
    finished leaves into the tree in file order, storing an internal node (8 KiB, one per
    174 leaves) as its level fills. The bounded queue keeps memory flat however large the
    file. Without a store, blocks are only hashed.

    Yields the bytes imported so far as batches are found done (the loop looks after every
    piece it receives), then the import's result."""
    importer = options.importer(store.add if store is not None else CID.of_parts)
    in_flight: deque[Future[list[Child]]] = deque()
    batch: list[list[memoryview]] = []
    batched = done = 0
    with ThreadPoolExecutor(_WORKERS, thread_name_prefix="ipfs-add") as workers:
        try:
            async for piece in part.chunks():
                batch += importer.chunks(piece)
                batched += len(piece)
                while in_flight and in_flight[0].done():
                    done += _link(importer, in_flight.popleft())
                    yield done
                if batched >= _BATCH_BYTES and batch:
                    if sum(not stored.done() for stored in in_flight) < _MAX_IN_FLIGHT:
                        in_flight.append(workers.submit(_store, importer, batch))
                    else:
                        in_flight.append(_stored_here(importer, batch))
                    batch, batched = [], 0
            if batch:  # every batch holds a leaf, so each one linked moves the progress on
                in_flight.append(workers.submit(_store, importer, batch))
            while in_flight:
                await _finished(in_flight[0])
                done += _link(importer, in_flight.popleft())
                yield done
            imported = await asyncio.get_running_loop().run_in_executor(workers, importer.finish)
        finally:
            if in_flight:  # the upload broke off: let queued work end before the workers go
                await asyncio.wait([asyncio.wrap_future(stored) for stored in in_flight])
    if imported.filesize > done:
        yield imported.filesize
    yield imported


def _stored_here(importer: FileImporter, chunks: list[list[memoryview]]) -> Future[list[Child]]:
    """Store a batch on the calling thread, as a finished future to queue behind the workers'."""
    stored: Future[list[Child]] = Future()
    stored.set_result(_store(importer, chunks))
    return stored


async def _finished(stored: Future[list[Child]]) -> None:
    """Wait for a worker's batch at the end of the body. Workers do not wake the event loop
    when a batch is done, as an asyncio future of theirs would: the loop looks at finished
    batches on its own turns."""
    if not stored.done():
        await asyncio.wait([asyncio.wrap_future(stored)])


def _link(importer: FileImporter, stored: Future[list[Child]]) -> int:
    """Link a finished batch's leaves (or raise its error); the file bytes they hold."""
    leaves = stored.result()
    for leaf in leaves:
        importer.link(leaf)
    return sum(leaf.filesize for leaf in leaves)


async def _add_events(
    body: AsyncIterator[bytes], repo: Repo, options: AddOptions, boundary: bytes
) -> AsyncIterator[dict[str, str | int]]:
    """Kubo's add events: with `progress`, the bytes of each file imported so far as it goes;
    a file's name, CID and cumulative size once it is in."""
    store = None if options.only_hash else repo.blocks
    # Polled rather than awaited in a thread: a cancelled wait must not leave the lock taken.
    while not repo.gc_lock.try_acquire_shared():
        await asyncio.sleep(_GC_WAIT_S)
    added = 0
    try:
        async for part in multipart.MultipartReader(body, boundary).parts():
            if part.is_directory:
                raise Unsupported("adding directories is not supported by this node, add files")
            async for event in _import(part, options, store):
                if isinstance(event, Imported):
                    imported = event
                elif options.progress:
                    yield {"Name": part.filename, "Bytes": event}
            if options.pin and not options.only_hash:
                await run_in_threadpool(repo.pins.add, imported.cid, RECURSIVE)
            name = part.filename or str(imported.cid)
            log.debug("added %s as %s (%d bytes)", name, imported.cid, imported.filesize)
            added += 1
            yield {"Name": name, "Hash": str(imported.cid), "Size": str(imported.size)}
    finally:
        repo.gc_lock.release_shared()
    if not added:
        raise multipart.MalformedMultipart("the request carried no file")


@router.post("/add")
async def add(
    request: Request, repo: RepoDep, body: BodyDep, options: Annotated[AddOptions, Query()]
) -> Response:
    """Import each file part of a multipart body; one JSON line per file, as Kubo answers.

    With `progress=true` the lines stream out as the body comes in, progress lines first (as
    Kubo sends them); an error found after that ends the stream with Kubo's error object."""
    options.check_supported()
    boundary = multipart.boundary_of(request.headers.get("content-type"))
    events = _add_events(body, repo, options, boundary)
    if options.progress:
        return EventStream(events)
    answer = "".join([json.dumps(event) + "\n" async for event in events])
    return Response(answer, media_type="application/json", headers={"X-Chunked-Output": "1"})


@router.post("/cat")
def cat(
    repo: RepoDep,
    cid: CidDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    length: Annotated[int | None, Query(ge=0)] = None,
) -> FileStream:
    reader.file_size(cid, repo.blocks.get, repo.walk_limits)
    return FileStream(
        reader.iter_file(cid, repo.blocks.get, offset, length, limits=repo.walk_limits),
        media_type="text/plain",
        headers={"X-Stream-Output": "1"},
    )


def _tar(name: str, size: int, chunks: Iterator[bytes]) -> Iterator[bytes]:
    """A one-file ustar/PAX stream; the header needs only the size, so the body streams."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    yield info.tobuf(format=tarfile.PAX_FORMAT)
    yield from chunks
    yield b"\0" * (-size % tarfile.BLOCKSIZE) + b"\0" * (2 * tarfile.BLOCKSIZE)


@router.post("/get")
def get(repo: RepoDep, cid: CidDep, compress: bool = False) -> FileStream:
    """A tar holding the file under its CID, as Kubo's `get` sends it."""
    if compress:
        raise Unsupported("compressed get is not supported by this node")
    size = reader.file_size(cid, repo.blocks.get, repo.walk_limits)
    chunks = reader.iter_file(cid, repo.blocks.get, limits=repo.walk_limits)
    return FileStream(
        _tar(str(cid), size, chunks),
        media_type="application/x-tar",
        headers={"X-Stream-Output": "1"},
    )
