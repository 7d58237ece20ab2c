"""Who may call the RPC API: a bearer token, as Kubo's `API.Authorizations` asks for, and no
browser page from a foreign origin. The RPC API can delete pins and collect garbage, so a web
page the node's owner happens to open must not reach it; the gateway (/ipfs/) is read-only
and stays open to all."""

import secrets
from dataclasses import dataclass

from fastapi import Request
from starlette.exceptions import HTTPException


@dataclass(frozen=True, slots=True)
class RpcAccess:
    token: str
    allowed_origins: frozenset[str]  # "*" allows every origin, as Kubo's setting does

    def origin_allowed(self, origin: str | None) -> bool:
        """Clients other than browsers send no Origin; a browser always does on a cross-site
        request, and the page cannot forge it."""
        return origin is None or "*" in self.allowed_origins or origin in self.allowed_origins

    def token_matches(self, authorization: str | None) -> bool:
        scheme, _, given = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(
            given.strip().encode(), self.token.encode()
        )


def require_rpc_access(request: Request) -> None:
    """Checked before any RPC handler runs or any of the body is read."""
    access: RpcAccess = request.app.state.access
    origin = request.headers.get("origin")
    if not access.origin_allowed(origin):
        raise HTTPException(
            403, f"requests from origin {origin!r} are not allowed to use the RPC API"
        )
    if not access.token_matches(request.headers.get("authorization")):
        raise HTTPException(
            401,
            "the RPC API needs 'Authorization: Bearer <token>'; the token is the node's "
            "ZOO_IPFS_API_TOKEN, or else the one in <repo>/api-token",
            headers={"WWW-Authenticate": 'Bearer realm="ipfs-rpc"'},
        )
