"""The trustless gateway: GET /ipfs/{cid} for a file, ?format=raw for one verifiable block,
?format=car for the whole DAG as a CAR."""

from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import Response

from marketplace.ipfs import car, reader
from marketplace.ipfs.api.deps import RepoDep
from marketplace.ipfs.api.streaming import FileStream
from marketplace.ipfs.cid import CID
from marketplace.ipfs.errors import BlockNotFound, Unsupported

router = APIRouter(prefix="/ipfs", tags=["gateway"])

RAW_BLOCK = "application/vnd.ipld.raw"
_IMMUTABLE = "public, max-age=29030400, immutable"


@router.api_route("/{path:path}", methods=["GET", "HEAD"])
def fetch(
    repo: RepoDep, path: str, format: str | None = None, accept: Annotated[str, Header()] = ""
) -> Response:
    cid = CID.parse(path)
    headers = {"X-Ipfs-Path": f"/ipfs/{cid}", "X-Ipfs-Roots": str(cid), "Cache-Control": _IMMUTABLE}
    if format == "raw" or (format is None and RAW_BLOCK in accept):
        headers |= {
            "Etag": f'"{cid}.raw"',
            "X-Content-Type-Options": "nosniff",
            "Content-Disposition": f'attachment; filename="{cid}.bin"',
        }
        return Response(repo.blocks.get(cid), media_type=RAW_BLOCK, headers=headers)
    if format == "car" or (format is None and car.MEDIA_TYPE in accept):
        if not repo.blocks.has(cid):  # a missing root is a 404, not a 200 cut short
            raise BlockNotFound(cid)
        headers |= {
            "Etag": f'"{cid}.car"',
            "X-Content-Type-Options": "nosniff",
            "Content-Disposition": f'attachment; filename="{cid}.car"',
        }
        return FileStream(
            car.stream(cid, repo.blocks.get, repo.walk_limits),
            media_type=car.CONTENT_TYPE,
            headers=headers,
        )
    if format is not None:
        raise Unsupported(f"format {format!r} is not supported, use raw, car or none")
    size = reader.file_size(cid, repo.blocks.get, repo.walk_limits)
    headers |= {"Etag": f'"{cid}"', "Content-Length": str(size)}
    return FileStream(
        reader.iter_file(cid, repo.blocks.get, limits=repo.walk_limits),
        media_type="application/octet-stream",
        headers=headers,
    )
