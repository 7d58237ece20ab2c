"""RPC routes for raw blocks: get, put, stat."""

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from marketplace.ipfs import multihash, multipart
from marketplace.ipfs.api.deps import BodyDep, CidDep, RepoDep
from marketplace.ipfs.cid import CODECS
from marketplace.ipfs.errors import InvalidBlock, Unsupported

router = APIRouter(prefix="/block", tags=["blocks"])

# Kubo refuses bigger blocks: peers could not exchange them.
MAX_BLOCK_SIZE = 1024 * 1024

# Kubo's deprecated --format values -> (CID version, codec name).
_LEGACY_FORMATS = {
    "v0": (0, "dag-pb"),
    "protobuf": (1, "dag-pb"),
    "dag-pb": (1, "dag-pb"),
    "raw": (1, "raw"),
}


class PutOptions(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    cid_codec: str = Field("raw", alias="cid-codec", description="raw or dag-pb")
    mhtype: str = Field("sha2-256", description="sha2-256 or sha2-512")
    mhlen: int = Field(-1, description="only the full digest length (-1)")
    format: str | None = Field(None, description="deprecated: v0, protobuf or raw")
    pin: bool = False

    def target(self) -> tuple[int, int, int]:
        """(CID version, codec, multihash code) the block will be named with."""
        version, codec_name = 1, self.cid_codec
        if self.format is not None:
            if self.format not in _LEGACY_FORMATS:
                raise Unsupported(f"block format {self.format!r} is not supported")
            version, codec_name = _LEGACY_FORMATS[self.format]
        if codec_name not in CODECS:
            raise Unsupported(f"codec {codec_name!r} is not supported, only raw and dag-pb")
        hash_code = multihash.code_for(self.mhtype)
        if self.mhlen != -1:
            raise Unsupported("truncated multihashes (mhlen) are not supported")
        if version == 0 and hash_code != multihash.SHA2_256:
            version = 1  # a CIDv0 can only name sha2-256, as Kubo also decides
        return version, CODECS[codec_name], hash_code


async def _read_block(part: multipart.Part) -> bytes:
    data = bytearray()
    async for piece in part.chunks():
        data += piece
        if len(data) > MAX_BLOCK_SIZE:
            raise InvalidBlock(
                f"block is over {MAX_BLOCK_SIZE} bytes: big blocks cannot be "
                "exchanged with other peers, use add for automatic chunking"
            )
    return bytes(data)


@router.post("/put")
async def put(
    request: Request, repo: RepoDep, body: BodyDep, options: Annotated[PutOptions, Query()]
) -> Response:
    """Store each file part as one block, named by the hash of its bytes."""
    version, codec, hash_code = options.target()
    boundary = multipart.boundary_of(request.headers.get("content-type"))
    lines = []
    async for part in multipart.MultipartReader(body, boundary).parts():
        data = await _read_block(part)
        cid = await run_in_threadpool(repo.put_block, data, codec, version, hash_code, options.pin)
        lines.append(f'{{"Key": "{cid}", "Size": {len(data)}}}\n')
    if not lines:
        raise multipart.MalformedMultipart("the request carried no block")
    return Response(
        "".join(lines), media_type="application/json", headers={"X-Chunked-Output": "1"}
    )


@router.post("/get")
def get(repo: RepoDep, cid: CidDep) -> Response:
    return Response(repo.blocks.get(cid), media_type="application/octet-stream")


@router.post("/stat")
def stat(repo: RepoDep, cid: CidDep) -> dict:
    return {"Key": str(cid), "Size": repo.blocks.size(cid)}
