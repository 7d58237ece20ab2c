"""Sessions for off-chain writes: a wallet signs an EIP-4361 message with a gateway nonce, gets a
bearer token."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from marketplace.errors import ZooError
from marketplace.gateway import db
from marketplace.gateway.siwe import SiweError, SiweMessage, check_signature

NONCE_TTL = 300  # seconds a nonce waits for its signed message
_HEX = re.compile(r"^[0-9a-f]+$")
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
    """A fresh single-use nonce and when it expires. Nothing is written: the nonce is a random
    part, its expiry and a MAC over both, so anonymous callers cannot fill the database."""
    expires = int(now or time.time()) + NONCE_TTL
    body = f"{secrets.token_hex(8)}{expires:010x}"
    return body + _mac(session, body), expires


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
    nonce_expires = _nonce_expiry(session, message.nonce, now)
    check_signature(text, signature, message.address)
    session.execute(delete(db.SignInNonce).where(db.SignInNonce.expires_at <= now))
    session.execute(delete(db.AuthSession).where(db.AuthSession.expires_at <= now))
    session.add(db.SignInNonce(nonce=message.nonce, expires_at=nonce_expires))
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        raise SiweError(f"nonce {message.nonce} is used") from None
    expires = int(now) + SESSION_TTL
    if message.expiration_time is not None:
        expires = min(expires, int(message.expiration_time.timestamp()))
    token = secrets.token_urlsafe(32)
    session.add(
        db.AuthSession(token_sha256=_digest(token), address=message.address, expires_at=expires)
    )
    session.commit()
    return SignedIn(token, message.address, expires)


def _nonce_expiry(session: Session, nonce: str, now: float) -> int:
    """When a nonce this gateway issued expires; refused if it did not issue it or it expired."""
    body, mac = nonce[:26], nonce[26:]
    expires = int(body[16:], 16) if len(nonce) == 58 and _HEX.match(nonce) else 0
    if not (expires > now and hmac.compare_digest(mac, _mac(session, body))):
        raise SiweError(f"nonce {nonce} was not issued by this gateway or has expired")
    return expires


def _mac(session: Session, body: str) -> str:
    return hmac.new(_secret(session, "sign-in-nonce"), body.encode(), "sha256").hexdigest()[:32]


def _secret(session: Session, name: str) -> bytes:
    """The gateway's shared key `name`, made on first use; two processes racing to make it both
    end up with the one that was stored first."""
    row = session.get(db.GatewaySecret, name)
    if row is None:
        session.add(db.GatewaySecret(name=name, value=secrets.token_hex(32)))
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
        row = session.get(db.GatewaySecret, name)
    assert row is not None
    return bytes.fromhex(row.value)


def signed_in_address(session: Session, token: str, now: float | None = None) -> str:
    """The wallet a bearer token signed in, while its session lasts."""
    row = session.get(db.AuthSession, _digest(token))
    if row is None or row.expires_at <= (now or time.time()):
        raise NotSignedIn("the session token is unknown or expired: sign in again")
    return row.address
