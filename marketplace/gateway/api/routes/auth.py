"""Sign-In with Ethereum (EIP-4361): a nonce, then the signed message for a bearer token."""

from __future__ import annotations

from fastapi import APIRouter, Request

from marketplace.gateway import auth
from marketplace.gateway.api.deps import LedgerDep, SessionDep
from marketplace.gateway.api.schemas import REFUSED, NonceOut, SessionOut, SignInRequest

router = APIRouter(prefix="/auth", tags=["auth"])


@router.get("/nonce", response_model=NonceOut)
def nonce(session: SessionDep, ledger: LedgerDep):
    """A single-use nonce for the message, and the chain id it must name."""
    value, expires_at = auth.issue_nonce(session)
    return {"nonce": value, "expires_at": expires_at, "chain_id": ledger.deployment.chain_id}


@router.post("/session", response_model=SessionOut, responses=REFUSED)
def sign_in(session: SessionDep, ledger: LedgerDep, body: SignInRequest, request: Request):
    """Open a session: the message must name this gateway's domain, this chain, a live nonce of
    ours, and be signed by its address."""
    signed = auth.sign_in(
        session,
        body.message,
        bytes.fromhex(body.signature[2:]),
        domain=sign_in_domain(request),
        chain_id=ledger.deployment.chain_id,
    )
    return {"token": signed.token, "address": signed.address, "expires_at": signed.expires_at}


def sign_in_domain(request: Request) -> str:
    """The domain messages must sign in to: ZOO_GATEWAY_DOMAIN, else the address the server listens
    on. Never the request's Host header, which the client writes: a phishing site relaying a
    victim's signed message would name its own host there."""
    configured = request.app.state.settings.gateway_domain
    if configured:
        return configured
    host, port = request.scope["server"]
    default = {"http": 80, "https": 443}.get(request.url.scheme)
    return host if port == default else f"{host}:{port}"
