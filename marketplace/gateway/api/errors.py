"""Every refusal the gateway raises on purpose becomes a 4xx (or a 503 for a service it depends on)
with a message."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from marketplace.chain.errors import ChainError, ContractRevert
from marketplace.errors import ZooError
from marketplace.gateway.auth import NotSignedIn
from marketplace.protocol.spec import SpecError
from marketplace.storage import NodeUnavailable

# First match wins: project errors also inherit the built-in that says what kind of refusal they
# are.
STATUSES: tuple[tuple[type[Exception], int], ...] = (
    (NotSignedIn, 401),
    (PermissionError, 403),
    (LookupError, 404),
    (ContractRevert, 409),  # the ledger would revert: the chain's state does not allow it now
    (ValueError, 400),  # 422 stays FastAPI's own: a request that does not match the schema
    (NodeUnavailable, 503),
    (ChainError, 503),  # no answer from the RPC endpoint
)


def status_of(exc: Exception) -> int:
    return next((status for kind, status in STATUSES if isinstance(exc, kind)), 400)


def refused(_: Request, exc: Exception) -> JSONResponse:
    status = status_of(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    detail = f"invalid job spec: {exc}" if isinstance(exc, SpecError) else str(exc)
    named = {"error": exc.name} if isinstance(exc, ContractRevert) else {}
    return JSONResponse(status_code=status, content={"detail": detail} | named, headers=headers)


def method_not_allowed(request: Request, _: Exception) -> JSONResponse:
    """Starlette's `Allow` names only the first route on a path; a path with a GET and a POST route
    needs both."""
    allowed = sorted(
        {
            method
            for route in request.app.routes
            if isinstance(route, APIRoute) and route.path_regex.match(request.url.path)
            for method in route.methods
        }
    )
    return JSONResponse(
        status_code=405,
        content={"detail": "Method Not Allowed"},
        headers={"Allow": ", ".join(allowed)},
    )


def install(app: FastAPI) -> None:
    for kind in (ZooError, SpecError):  # the protocol's spec errors are plain ValueErrors
        app.add_exception_handler(kind, refused)
    app.add_exception_handler(405, method_not_allowed)
