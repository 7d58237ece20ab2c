"""Sessions for off-chain writes: a wallet signs an EIP-4361 message with a gateway nonce, gets a
bearer token."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete
from sqlalchemy.orm import Session

from marketplace.errors import ZooError
from marketplace.gateway import db
from marketplace.gateway.siwe import SiweError, SiweMessage, check_signature

NONCE_TTL = 300  # seconds a nonce waits for its signed message
SESSION_TTL = 24 * 3600  # longest a session lasts; a message's own expiration can cut it shorter


class NotSignedIn(ZooError, PermissionError):
    """No bearer token, or one that names no live session."""


@dataclass(frozen=True)
class SignedIn:
    token: str
    address: str
    expires_at: int  # unix seconds


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_nonce(session: Session, now: float | None = None) -> tuple[str, int]:
    """A fresh single-use nonce and when it expires; expired nonces and sessions are swept here."""
    now = int(now or time.time())
    session.execute(delete(db.SignInNonce).where(db.SignInNonce.expires_at <= now))
    session.execute(delete(db.AuthSession).where(db.AuthSession.expires_at <= now))
    nonce = secrets.token_hex(16)
    session.add(db.SignInNonce(nonce=nonce, expires_at=now + NONCE_TTL))
    session.commit()
    return nonce, now + NONCE_TTL


def sign_in(
    session: Session,
    text: str,
    signature: bytes,
    *,
    domain: str,
    chain_id: int,
    now: float | None = None,
) -> SignedIn:
    """Check the message for this gateway and chain, spend its nonce, and open a session."""
    now = now or time.time()
    message = SiweMessage.parse(text)
    message.check(domain=domain, chain_id=chain_id, now=datetime.fromtimestamp(now, UTC))
    check_signature(text, signature, message.address)
    spent = session.execute(
        delete(db.SignInNonce).where(
            db.SignInNonce.nonce == message.nonce, db.SignInNonce.expires_at > now
        )
    )
    if spent.rowcount != 1:
        session.rollback()
        raise SiweError(
            f"nonce {message.nonce} was not issued by this gateway, is used or has expired"
        )
    expires = int(now) + SESSION_TTL
    if message.expiration_time is not None:
        expires = min(expires, int(message.expiration_time.timestamp()))
    token = secrets.token_urlsafe(32)
    session.add(
        db.AuthSession(token_sha256=_digest(token), address=message.address, expires_at=expires)
    )
    session.commit()
    return SignedIn(token, message.address, expires)


def signed_in_address(session: Session, token: str, now: float | None = None) -> str:
    """The wallet a bearer token signed in, while its session lasts."""
    row = session.get(db.AuthSession, _digest(token))
    if row is None or row.expires_at <= (now or time.time()):
        raise NotSignedIn("the session token is unknown or expired: sign in again")
    return row.address
