"""The keys a group's ranks sign their payloads with (marketplace/protocol/round_signatures.py)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from eth_account import Account

from marketplace.protocol.round_signatures import RoundSigners, sign_round, signed_by


@dataclass(frozen=True)
class RoundSigning:
    """A job's signers, one address per rank, and the keys of the ranks this process plays:
    a provider's own, or every rank's where one machine plays the whole group."""

    job_id: int
    addresses: tuple[str, ...]  # by rank
    keys: dict[int, bytes] = field(repr=False)  # rank -> private key
    # where the provider's daemon keeps the slots' holders as the chain has them now (JSON:
    # `holders`, a list of addresses by rank, and `open_through`): a slot handed over mid-job
    # signs with its new holder's key
    holders_file: str | None = None
    # the last exchange the rank may take part in with these holders: its daemon opens more
    # as it reads the chain after its commits (node/daemon/group_worker.py); None with no file
    open_through: int | None = None

    def refreshed(self) -> RoundSigning:
        """The signing with the holders the daemon last wrote down; itself without any."""
        if self.holders_file is None:
            return self
        try:
            view = json.loads(Path(self.holders_file).read_text())
        except (OSError, ValueError):
            return self
        if not isinstance(view, dict):
            return self
        holders, through = view.get("holders"), view.get("open_through")
        if not (
            isinstance(holders, list)
            and len(holders) == len(self.addresses)
            and type(through) is int
        ):
            return self
        return replace(self, addresses=tuple(str(a) for a in holders), open_through=through)

    @property
    def signers(self) -> RoundSigners:
        return RoundSigners(self.job_id, dict(enumerate(self.addresses)))

    def sign(self, rank: int, round_: int, payload: bytes) -> bytes:
        return sign_round(self.keys[rank], self.job_id, round_, rank, payload)

    def signed(self, rank: int, round_: int, payload: bytes, signature: bytes | None) -> bool:
        """Whether `rank`'s signer signed `payload` as its payload for the round."""
        return signed_by(self.signers, round_, rank, payload, signature)


def local_key(rank: int) -> bytes:
    """A well-known key for `rank` of a group one machine plays whole (tests, benchmarks,
    a user's local run): it proves nothing to anyone else, as its name says."""
    return hashlib.sha256(b"zoo-compute local rank %d" % rank).digest()


def local_signing(ranks: int, job_id: int = 0) -> RoundSigning:
    """The signing of a group this machine plays whole, every rank with its `local_key`."""
    keys = {rank: local_key(rank) for rank in range(ranks)}
    addresses = tuple(Account.from_key(keys[rank]).address for rank in range(ranks))
    return RoundSigning(job_id, addresses, keys)
