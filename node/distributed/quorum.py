"""Rounds that close at a deadline with a quorum: the ranks post updates, one closes the round."""

from __future__ import annotations

import json
import logging
import time

import torch.distributed as dist

from marketplace.errors import ZooError

logger = logging.getLogger(__name__)

_POLL_S = 0.005  # between looks at the store while a round is open


class QuorumTimeout(ZooError, TimeoutError):
    """Too few ranks posted their update for a round to close."""


class RoundBoard:
    """The group's key-value store used as a notice board, one round at a time.

    Every rank posts its payload under `(round, rank)` and waits. The round closes when all
    ranks have posted, or once `deadline_s` has passed since the first post and at least
    `quorum` have: the first rank to see either writes the round's members with an atomic
    compare-and-set, and every rank reads the same members back, so all aggregate the same
    payloads. A rank that posts after the round closed is told it is not a member and
    takes the round's result from the members' payloads like everyone else, which is how
    a straggler rejoins on the group's state without any catch-up protocol. Payloads
    stay on the board while the group lives, for ranks that are still behind.

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
        self.store = dist.PrefixStore("rounds", store)
        self.ranks = ranks
        self.quorum = quorum
        self.deadline_s = deadline_s
        self.give_up_s = give_up_s  # a round without a quorum for this long fails the job

    def post(self, round_: int, rank: int, payload: bytes) -> None:
        # the first post opens the round; compare_set keeps the earliest time
        self.store.compare_set(f"{round_}/opened", "", repr(time.time()))
        # the stub says str, but the binding takes bytes as they are
        self.store.set(f"{round_}/{rank}", payload)  # type: ignore[arg-type]

    def members(self, round_: int) -> list[int]:
        """The ranks whose payloads make up `round_`, the same on every rank."""
        key = f"{round_}/members"
        opened = float(self.store.get(f"{round_}/opened"))
        while not self.store.check([key]):
            posted = [r for r in range(self.ranks) if self.store.check([f"{round_}/{r}"])]
            waited = time.time() - opened
            if len(posted) == self.ranks or (
                waited >= self.deadline_s and len(posted) >= self.quorum
            ):
                self.store.compare_set(key, "", json.dumps(posted))
                break
            if waited >= self.give_up_s:
                raise QuorumTimeout(
                    f"round {round_}: {len(posted)} of {self.ranks} updates after "
                    f"{waited:.0f} s; the quorum is {self.quorum}"
                )
            time.sleep(_POLL_S)
        members = json.loads(self.store.get(key))
        if len(members) < self.ranks:
            logger.info("round %d closed with ranks %s", round_, members)
        return members

    def payloads(self, round_: int, members: list[int]) -> list[bytes]:
        return [self.store.get(f"{round_}/{rank}") for rank in members]
