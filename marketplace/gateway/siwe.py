"""EIP-4361 (Sign-In with Ethereum) messages: written, parsed and checked, so a wallet signature
opens a session.

The `siwe` package on PyPI does not import with the current `abnf` release, so the message's
grammar is read here with one regular expression per line, as the EIP lays them out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from eth_account import Account
from eth_account.messages import encode_defunct
from eth_utils import is_checksum_address

from marketplace.errors import ZooError

PREAMBLE = " wants you to sign in with your Ethereum account:"
NONCE = re.compile(r"^[A-Za-z0-9]{8,}$")
CHAIN_ID = re.compile(r"^[0-9]{1,20}$")  # ASCII digits only: str.isdigit() also takes '²'.
_FIELDS = (  # (attribute, label) in the order the EIP fixes
    ("uri", "URI"),
    ("version", "Version"),
    ("chain_id", "Chain ID"),
    ("nonce", "Nonce"),
    ("issued_at", "Issued At"),
    ("expiration_time", "Expiration Time"),
    ("not_before", "Not Before"),
    ("request_id", "Request ID"),
)
_REQUIRED = {"uri", "version", "chain_id", "nonce", "issued_at"}
_TIMES = {"issued_at", "expiration_time", "not_before"}


class SiweError(ZooError, ValueError):
    """A sign-in message that does not parse, or does not hold for this gateway, now."""


@dataclass(frozen=True)
class SiweMessage:
    domain: str  # the host the user signs in to
    address: str  # EIP-55 checksummed
    uri: str
    chain_id: int
    nonce: str  # issued by the gateway, single use
    issued_at: datetime
    version: str = "1"
    statement: str | None = None
    expiration_time: datetime | None = None
    not_before: datetime | None = None
    request_id: str | None = None
    resources: tuple[str, ...] = field(default_factory=tuple)

    def text(self) -> str:
        """The exact text a wallet signs (EIP-191 personal_sign)."""
        lines = [self.domain + PREAMBLE, self.address, ""]
        if self.statement is not None:
            lines += [self.statement, ""]
        else:
            lines += [""]
        for attr, label in _FIELDS:
            value = getattr(self, attr)
            if value is not None:
                lines.append(f"{label}: {_rfc3339(value) if attr in _TIMES else value}")
        if self.resources:
            lines += ["Resources:", *(f"- {r}" for r in self.resources)]
        return "\n".join(lines)

    @classmethod
    def parse(cls, text: str) -> SiweMessage:
        lines = text.split("\n")
        if len(lines) < 4 or not lines[0].endswith(PREAMBLE) or lines[2] != "":
            raise SiweError(
                "not a Sign-In with Ethereum message: it must start with "
                f"'<domain>{PREAMBLE}', the address, and a blank line"
            )
        domain, address = lines[0].removesuffix(PREAMBLE), lines[1]
        if not domain or " " in domain:
            raise SiweError(f"bad domain {domain!r}")
        if not is_checksum_address(address):
            raise SiweError(f"{address!r} is not an EIP-55 checksummed address")
        rest = lines[3:]
        statement = None
        if rest and rest[0] != "":
            statement, rest = rest[0], rest[1:]
            if not rest or rest[0] != "":
                raise SiweError("the statement must be one line followed by a blank line")
        values = cls._fields(rest[1:] if rest and rest[0] == "" else rest)
        missing = sorted(_REQUIRED - values.keys())
        if missing:
            raise SiweError(f"the message lacks {', '.join(missing)}")
        return cls(domain=domain, address=address, statement=statement, **values)

    @staticmethod
    def _fields(lines: list[str]) -> dict:
        values: dict = {}
        labels = {label: attr for attr, label in _FIELDS}
        order = [attr for attr, _ in _FIELDS]
        last = -1
        for i, line in enumerate(lines):
            if line == "Resources:":
                resources = lines[i + 1 :]
                if not all(r.startswith("- ") for r in resources):
                    raise SiweError("each resource must be a line starting with '- '")
                values["resources"] = tuple(r[2:] for r in resources)
                break
            label, sep, value = line.partition(": ")
            attr = labels.get(label)
            if not sep or attr is None or order.index(attr) <= last:
                raise SiweError(f"unexpected line {line!r}")
            last = order.index(attr)
            values[attr] = _field_value(attr, value)
        return values

    def check(self, *, domain: str, chain_id: int, now: datetime) -> None:
        """Refuse a message meant for another host or chain, or outside its validity window."""
        if self.domain != domain:
            raise SiweError(f"the message signs in to {self.domain!r}, not {domain!r}")
        if self.chain_id != chain_id:
            raise SiweError(
                f"the message is for chain {self.chain_id}, this gateway serves chain {chain_id}"
            )
        if self.version != "1":
            raise SiweError(f"unsupported message version {self.version!r}")
        if self.expiration_time is not None and self.expiration_time <= now:
            raise SiweError(f"the message expired at {_rfc3339(self.expiration_time)}")
        if self.not_before is not None and self.not_before > now:
            raise SiweError(f"the message is not valid before {_rfc3339(self.not_before)}")


def check_signature(text: str, signature: bytes, address: str) -> None:
    """Refuse unless `address` signed exactly `text` (EIP-191): the posted text, not a
    re-rendering."""
    try:
        signer = Account.recover_message(encode_defunct(text=text), signature=signature)
    except (ValueError, TypeError) as exc:
        raise SiweError(f"unreadable signature: {exc}") from None
    if signer != address:
        raise SiweError(f"the signature is by {signer}, not by {address}")


def _field_value(attr: str, value: str):
    if attr == "chain_id":
        if not CHAIN_ID.match(value):
            raise SiweError(f"chain id {value!r} is not a number")
        return int(value)
    if attr == "nonce" and not NONCE.match(value):
        raise SiweError("the nonce must be at least 8 letters or digits")
    if attr in _TIMES:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise SiweError(f"{value!r} is not an RFC 3339 time") from None
        if parsed.tzinfo is None:
            raise SiweError(f"{value!r} has no time zone")
        return parsed
    return value


def _rfc3339(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
