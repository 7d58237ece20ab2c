"""The embedded node's HTTP server: the Kubo RPC subset and the gateway on one port."""

import logging
import os
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException

from marketplace.ipfs import allocator
from marketplace.ipfs.api import blocks, files, gateway, node, pins
from marketplace.ipfs.api.access import RpcAccess, require_rpc_access
from marketplace.ipfs.blockstore import CorruptBlock
from marketplace.ipfs.errors import AddTooLarge, BlockNotFound, IpfsError, RepoFull
from marketplace.ipfs.http_protocol import node_protocol
from marketplace.ipfs.pinstore import NotPinned
from marketplace.ipfs.repo import Repo
from marketplace.ipfs.settings import NodeSettings
from marketplace.serving import QuietServer

log = logging.getLogger(__name__)

API_PREFIX = "/api/v0"
# A corrupt local block is reported like a missing one: this node cannot serve valid bytes
# for the CID, and a client should try another replica.
_STATUS: dict[type[IpfsError], int] = {
    BlockNotFound: 404,
    NotPinned: 404,
    CorruptBlock: 404,
    AddTooLarge: 413,
    RepoFull: 507,  # Insufficient Storage
}
# Body buffers the allocator reuses rather than returns to the kernel: above one network read
# (up to 2 MiB of a body), and room for what an add holds in flight at once.
_LARGEST_REUSED = 4 * 1024 * 1024
_KEPT_FREE = 32 * 1024 * 1024


def _error(
    request: Request, status: int, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    """Kubo's RPC error shape; the gateway answers in plain text, as gateways do."""
    if request.url.path.startswith("/ipfs/"):
        return PlainTextResponse(message, status, headers)
    return JSONResponse({"Message": message, "Code": 0, "Type": "error"}, status, headers)


async def _ipfs_error(request: Request, exc: IpfsError) -> Response:
    status = next((code for kind, code in _STATUS.items() if isinstance(exc, kind)), 400)
    return _error(request, status, str(exc))


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors()
    )
    return _error(request, 400, problems)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return _error(request, exc.status_code, str(exc.detail), exc.headers)


# Starlette calls each handler with the exceptions of the class it is registered for; its
# signature for a handler says any Exception, hence Any for the argument here.
_HANDLERS: dict[type[Exception], Callable[[Request, Any], Awaitable[Response]]] = {
    IpfsError: _ipfs_error,
    RequestValidationError: _validation_error,
    HTTPException: _http_error,
}


def create_app(repo: Repo, access: RpcAccess) -> FastAPI:
    app = FastAPI(
        title="Zoo Compute IPFS node",
        description="The Kubo RPC subset the project uses, and a trustless gateway.",
    )
    app.state.repo = repo
    app.state.access = access
    for module in (files, blocks, pins, node):
        app.include_router(
            module.router, prefix=API_PREFIX, dependencies=[Depends(require_rpc_access)]
        )
    app.include_router(gateway.router)
    for exc_class, handler in _HANDLERS.items():
        app.add_exception_handler(exc_class, handler)
    return app


def _listen(host: str, port: int) -> socket.socket:
    """Bind before serving so port 0 can be resolved and published in the repo's api file."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def _exit_on_signal(signum: int, frame: object) -> None:
    """uvicorn shuts down gracefully on SIGINT/SIGTERM and then re-raises the signal; ending
    with SystemExit instead of dying by the signal lets `serve` release the repo in `finally`."""
    raise SystemExit(128 + signum)


def serve(host: str, port: int, repo_path: str | os.PathLike) -> None:
    """Run the node until SIGINT/SIGTERM. Once `<repo>/api` exists the port accepts requests
    (the socket is listening before the file is written), which is the readiness signal.
    Its token, origins, quotas, walk and connection bounds come from the ZOO_IPFS_* settings."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _exit_on_signal)
    allocator.reuse_freed_buffers(_LARGEST_REUSED, _KEPT_FREE)
    settings = NodeSettings()
    repo = Repo(repo_path, settings.quotas(), settings.walk_limits())
    try:
        token = settings.api_token
        access = RpcAccess(
            repo.api_token(token.get_secret_value() if token else None),
            frozenset(settings.allowed_origins),
        )
        sock = _listen(host, port)
        bound_port = sock.getsockname()[1]
        proto = "ip6" if sock.family == socket.AF_INET6 else "ip4"
        repo.write_api_file(f"/{proto}/{host}/tcp/{bound_port}")
        log.info(
            "IPFS RPC API listening on http://%s:%d%s (repo %s, bearer token %s)",
            host,
            bound_port,
            API_PREFIX,
            repo.path,
            "from ZOO_IPFS_API_TOKEN" if token else f"in {repo.path / 'api-token'}",
        )
        # uvicorn's signature asks for an asyncio.Protocol; a BufferedProtocol serves the same.
        config = uvicorn.Config(
            create_app(repo, access),
            http=node_protocol(settings.connection_bounds()),  # type: ignore[arg-type]
            ws="none",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=30,
        )
        QuietServer(config).run(sockets=[sock])
    finally:
        repo.close()
