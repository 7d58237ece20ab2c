"""Rounds that close at a deadline with a quorum: the ranks post updates, one closes the round."""

from __future__ import annotations

import json
import logging
import time

import torch.distributed as dist

from marketplace.errors import ZooError

from .store import ANY_RANK, KeyRule

logger = logging.getLogger(__name__)

_POLL_S = 0.005  # between looks at the store while a round is open
# bytes of a payload per key: the group's store refuses a value over 8 MiB, and a model's
# compressed update can be larger, so a payload goes up in parts
PART_BYTES = 4 * 2**20
_PREFIX = "rounds"  # the board's keys in the group's store


def board_rule(key: str) -> KeyRule:
    """Who may write a key of the group's store (store.KeyRule): a round's post, its count and
    its parts, only its rank; a round's members any rank, once; a key the board does not read,
    any rank. Otherwise one member could overwrite every other's posts, and each rank would then
    refuse the others' payloads as unsigned and aggregate its own alone, round after round."""
    parts = key.split("/")
    if len(parts) < 3 or parts[0] != _PREFIX or not parts[1].isdigit():
        return ANY_RANK
    if parts[2:] == ["members"]:
        return KeyRule(once=True)
    if parts[2].isdigit() and (len(parts) == 3 or (len(parts) == 4 and parts[3].isdigit())):
        return KeyRule(owner=int(parts[2]))
    return ANY_RANK


class QuorumTimeout(ZooError, TimeoutError):
    """Too few ranks posted their update for a round to close."""


class RoundBoard:
    """The group's key-value store used as a notice board, one round at a time.

    Every rank posts its payload under `(round, rank)` and waits. The round closes when all
    ranks have posted, or once `deadline_s` has passed since this rank posted and at least
    `quorum` have: the first rank to see either writes the round's members with an atomic
    compare-and-set, and every rank reads the same members back, so all aggregate the same
    payloads. A rank that posts after the round closed is told it is not a member and
    takes the round's result from the members' payloads like everyone else, which is how
    a straggler rejoins on the group's state without any catch-up protocol. Payloads
    stay on the board for ranks that are still behind, until every slot committed their
    round's unit (`forget`).

    The store lets only a post's rank write it (`board_rule`), but the host keeps the store
    and can write any key, so nothing read off the board sets a rank's clock: each
    times the deadline and the give-up from its own post (the earliest poster still closes
    the round for all), and takes the board's members only if they could be a round's,
    closing the round on its own view otherwise. Honest ranks may then hold different
    members, which the verifiers allow (verifier/group_records.py).

    torchft 0.2.0 (Manager + lighthouse) forms a quorum the same way, from the replicas
    that join within a timeout, but falls short here: the Manager's only data collective is
    an all-reduce (sum or mean), while robust aggregation needs every member's update; a
    replica that fell behind heals by fetching a peer's whole state over HTTP (weights and
    optimizer in full precision, more than a compressed run sends in total), where here it
    rebuilds the round from the compressed payloads already posted; and every job would
    need a lighthouse server that all its providers can reach.
    """

    def __init__(
        self,
        store: dist.Store,
        ranks: int,
        quorum: int,
        deadline_s: float,
        *,
        give_up_s: float = 300.0,
    ):
        self.store = dist.PrefixStore(_PREFIX, store)
        # deletes go to the store itself: torch's PrefixStore cannot delete through a store
        # written in Python (store.GroupStore), nor call one that nothing else references
        self._base = store
        self.ranks = ranks
        self.quorum = quorum
        self.deadline_s = deadline_s
        self.give_up_s = give_up_s  # a round without a quorum for this long fails the job
        self.posted_at: dict[int, float] = {}  # this rank's clock when it posted, per round

    def post(self, round_: int, rank: int, payload: bytes) -> None:
        self.posted_at.setdefault(round_, time.monotonic())
        parts = [payload[i : i + PART_BYTES] for i in range(0, len(payload), PART_BYTES)]
        for index, part in enumerate(parts):
            # the stub says str, but the binding takes bytes as they are
            self.store.set(f"{round_}/{rank}/{index}", part)  # type: ignore[arg-type]
        self.store.set(f"{round_}/{rank}", str(len(parts)))  # posted, once every part is up

    def members(self, round_: int) -> list[int]:
        """The ranks whose payloads make up `round_`, the same on every rank unless a member
        wrote unsound ones on the board."""
        key = f"{round_}/members"
        posted_at = self.posted_at.get(round_, time.monotonic())
        planted = False  # the board's members were unsound: not read again, up to 8 MiB a look
        while True:
            if not planted and self.store.check([key]):
                if (members := self._sound(round_, self.store.get(key))) is not None:
                    break
                planted = True
            posted = [r for r in range(self.ranks) if self.store.check([f"{round_}/{r}"])]
            waited = time.monotonic() - posted_at
            if len(posted) == self.ranks or (
                waited >= self.deadline_s and len(posted) >= self.quorum
            ):
                written = self.store.compare_set(key, "", json.dumps(posted))
                if (members := self._sound(round_, written)) is None:  # ours are sound
                    logger.warning(
                        "round %d: the board's members %r are unsound; closing with ranks %s",
                        round_,
                        written[:100],
                        posted,
                    )
                    members = posted
                break
            if waited >= self.give_up_s:
                raise QuorumTimeout(
                    f"round {round_}: {len(posted)} of {self.ranks} updates after "
                    f"{waited:.0f} s; the quorum is {self.quorum}"
                )
            time.sleep(_POLL_S)
        if len(members) < self.ranks:
            logger.info("round %d closed with ranks %s", round_, members)
        return members

    def _sound(self, round_: int, written: bytes) -> list[int] | None:
        """The members `written` for `round_` if an honest rank could have written them: ranks
        that posted, in order, at least a quorum. Anything else crashes or stalls the round, or
        makes the rank's committed record one the verifiers refuse."""
        try:
            members = json.loads(written)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            return None
        if (
            isinstance(members, list)
            and all(type(m) is int and 0 <= m < self.ranks for m in members)
            and members == sorted(set(members))
            and len(members) >= self.quorum
            and self.store.check([f"{round_}/{m}" for m in members])
        ):
            return members
        return None

    def forget(self, round_: int) -> None:
        """Take the round off the board, once every slot committed the unit it is in: no rank
        reads it again (one that starts again goes through it from the committed records), and
        the host's memory would otherwise grow with every round of the job. A count a member
        planted costs one look past the parts there are."""
        for rank in range(self.ranks):
            key = f"{round_}/{rank}"
            if not self.store.check([key]):
                continue
            for index in range(self._parts(key)):
                if not self._delete(f"{key}/{index}"):
                    break
            self._delete(key)
        self._delete(f"{round_}/members")

    def _delete(self, key: str) -> bool:
        return self._base.delete_key(f"{_PREFIX}/{key}")

    def payloads(self, round_: int, members: list[int], max_bytes: int) -> list[bytes]:
        """What each member posted, b"" for a post whose parts could not be a payload of at
        most `max_bytes` or are not all up (another member can write any key): the rank
        refuses it as unsigned rather than reading without bound or waiting on a part."""
        return [self._payload(f"{round_}/{rank}", max_bytes) for rank in members]

    def _parts(self, key: str) -> int:
        """How many parts the post under `key` says it is in; 0 for a count no post writes."""
        count = self.store.get(key)
        return int(count) if count.isdigit() and len(count) < 8 else 0

    def _payload(self, key: str, max_bytes: int) -> bytes:
        parts = self._parts(key)
        if not 0 < parts <= -(-max_bytes // PART_BYTES):
            return b""
        keys = [f"{key}/{index}" for index in range(parts)]
        if not self.store.check(keys):
            return b""
        return b"".join(self.store.get(k) for k in keys)
