"""Signed exchanges: what a group's rank sends in a round carries its provider's signature.

The ranks' payloads travel through channels other ranks run: rank 0 hosts the round board's
store, and gloo relays the others' payloads around its ring. Unsigned, any rank could rewrite
another's payload on its way, and every record of it would then contradict what its sender
committed. So a rank signs each payload with its provider's key over the job, the round, its
rank and the payload's sha256, a receiver refuses one not signed by its sender, and a record
keeps the signature: only a payload's sender can have made it, which a verifier checks against
the address that committed the sender's unit. A record of a payload nobody signed fails its
recorder; a payload its sender signed and did not commit fails the sender (docs/verification.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Literal, NamedTuple

from eth_account import Account
from eth_account.messages import encode_defunct

SIGNATURE_BYTES = 65  # r, s, v
_DOMAIN = b"zoo-compute/round-payload-v1"
_LOGIN_DOMAIN = b"zoo-compute/group-store-login-v1"


class Tenure(NamedTuple):
    """The exchanges (or, from the chain, the units) whose payloads a provider could have
    signed for a slot: from `first` through `last` (None: to the job's end)."""

    first: int
    last: int | None = None

    def covers(self, number: int) -> bool:
        return self.first <= number and (self.last is None or number <= self.last)


class RoundSigners(NamedTuple):
    """Who signs a group's payloads: the job they are for, each rank's signer's address (the
    provider that holds or committed its slot), and every holder of its slot with the
    exchanges it could have signed for the rank."""

    job_id: int
    addresses: Mapping[int, str]  # rank -> address; a rank missing here is not known yet
    # rank -> each provider its slot was assigned to in the job -> the exchanges (rounds or
    # steps) it could have signed for the rank (`slot_tenures`, in exchanges): what one signed
    # for the rank within them is the rank's payload in a record, though not its commitment
    former: Mapping[int, Mapping[str, Tenure]] = MappingProxyType({})

    def known(self, rank: int) -> bool:
        """Whether any provider is known to sign for `rank`."""
        return bool(self.former.get(rank)) or rank in self.addresses

    def holders(self, rank: int, round_: int) -> set[str]:
        """Every address whose signature stands for `rank`'s payload in the exchange `round_` of
        a record (lower case)."""
        found = {a.lower() for a, held in self.former.get(rank, {}).items() if held.covers(round_)}
        signer = self.addresses.get(rank)
        return found | ({signer.lower()} if signer else set())


class SlotEvent(NamedTuple):
    """What moved a slot of a group job, from the chain at `block`: its assignment to
    `provider`, or its unit `unit` committed by `provider`, or rejected (the slot does it
    again), or `provider` leaving it (removed, or released after a rejection)."""

    kind: Literal["assigned", "committed", "rejected", "left"]
    provider: str
    unit: int = 0
    block: int = 0


def slot_tenures(
    events: Iterable[SlotEvent], first_commits: Mapping[int, int]
) -> dict[str, Tenure]:
    """Each provider of a slot (lower case) -> the units whose exchanges it could have signed
    for the slot, from the slot's events in chain order (within a block, departures first, then
    assignments: that can only widen a tenure) and the block of each unit's first commitment by
    any slot of the job (`first_commits`, unit -> block).

    A provider assigned the slot starts from its last committed unit and goes through that
    unit's exchanges again, live where the records it took over do not hold, so it may sign
    from the unit before the slot's next one; a rejection later sends the slot back to the unit
    before the rejected one. A provider that committed a unit without a known assignment (a
    record begun after it) may have signed from the first unit.

    A provider that left the slot at block `b` signed for it until its daemon read the chain,
    which may be units later. But a rank takes part in unit `u` only once its daemon has read
    who holds the slots after the slot's unit `u - 2` was committed (node/daemon/group_worker.py),
    so no honest record of unit `u` names it where some slot first committed unit `u - 2` at
    block `b` or later: its last unit is two past the last unit first committed before `b`.
    """
    done, first, left = 0, dict[str, int](), dict[str, int]()
    for kind, provider, index, block in events:
        holder = provider.lower()
        if kind == "assigned":
            first.setdefault(holder, max(done - 1, 0))
            left.pop(holder, None)
        elif kind == "committed":
            done = index + 1
            first.setdefault(holder, 0)
        elif kind == "rejected":
            done = index
            first = {who: min(unit, max(index - 1, 0)) for who, unit in first.items()}
        else:
            left[holder] = block
    return {
        holder: Tenure(unit, _last_unit(left.get(holder), first_commits))
        for holder, unit in first.items()
    }


def _last_unit(left_at: int | None, first_commits: Mapping[int, int]) -> int | None:
    """The last unit a provider that left a slot at block `left_at` could have signed for it
    (`slot_tenures`); None for one that has not left."""
    if left_at is None:
        return None
    before = [unit for unit, block in first_commits.items() if block < left_at]
    return max(before, default=-1) + 2


def round_digest(job_id: int, round_: int, rank: int, payload: bytes) -> bytes:
    """What a rank signs for the payload it sends in a round of a job: a signature cannot be
    replayed into another job, round or rank."""
    fields = b"%s|%d|%d|%d|" % (_DOMAIN, job_id, round_, rank)
    return hashlib.sha256(fields + hashlib.sha256(payload).digest()).digest()


def store_login_digest(job_id: int, rank: int, nonce: bytes) -> bytes:
    """What a rank signs to log in to its group's store as `rank` (node/distributed/store.py):
    the host's fresh nonce, so a login cannot be replayed into another job, rank or session."""
    return hashlib.sha256(b"%s|%d|%d|" % (_LOGIN_DOMAIN, job_id, rank) + nonce).digest()


def sign_digest(key: bytes, digest: bytes) -> bytes:
    """The signature of the provider that holds `key` on `digest` (an Ethereum signed message)."""
    message = encode_defunct(primitive=digest)
    return bytes(Account.sign_message(message, private_key=key).signature)


def digest_signer(digest: bytes, signature: bytes | None) -> str | None:
    """The address that signed `digest`; None for no signature or one that does not recover
    (any bytes may arrive here)."""
    if signature is None or len(signature) != SIGNATURE_BYTES:
        return None
    try:
        return str(Account.recover_message(encode_defunct(primitive=digest), signature=signature))
    except Exception:  # noqa: BLE001 - eth_keys raises several kinds for malformed signatures
        return None


def sign_round(key: bytes, job_id: int, round_: int, rank: int, payload: bytes) -> bytes:
    """The signature of the rank whose provider holds `key` on its payload for the round."""
    return sign_digest(key, round_digest(job_id, round_, rank, payload))


def round_signer(
    signature: bytes | None, job_id: int, round_: int, rank: int, payload: bytes
) -> str | None:
    """The address that signed `payload` as `rank`'s in the round; None for no signature or
    one that does not recover."""
    return digest_signer(round_digest(job_id, round_, rank, payload), signature)


def signed_by(
    signers: RoundSigners, round_: int, rank: int, payload: bytes, signature: bytes | None
) -> bool:
    """Whether `rank`'s known signer signed `payload` as its payload for the round."""
    address = signers.addresses.get(rank)
    return address is not None and _signed_by_one_of(
        {address.lower()}, signers.job_id, round_, rank, payload, signature
    )


def signed_by_a_holder(
    signers: RoundSigners, round_: int, rank: int, payload: bytes, signature: bytes | None
) -> bool:
    """Whether `rank`'s signer, or a holder of its slot by then, signed `payload` as its
    payload for the round."""
    return _signed_by_one_of(
        signers.holders(rank, round_), signers.job_id, round_, rank, payload, signature
    )


def _signed_by_one_of(
    addresses: set[str],
    job_id: int,
    round_: int,
    rank: int,
    payload: bytes,
    signature: bytes | None,
) -> bool:
    found = round_signer(signature, job_id, round_, rank, payload) if addresses else None
    return found is not None and found.lower() in addresses
