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
    """Open a session: the message must name this host as its domain, this chain, a live nonce of
    ours, and be signed by its address."""
    signed = auth.sign_in(
        session,
        body.message,
        bytes.fromhex(body.signature[2:]),
        domain=request.headers.get("host", ""),
        chain_id=ledger.deployment.chain_id,
    )
    return {"token": signed.token, "address": signed.address, "expires_at": signed.expires_at}
