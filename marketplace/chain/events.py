"""Follow the ledger's events in chain order, each once, from a block a daemon can persist, and
notice when the chain drops a block already read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eth_utils import event_abi_to_log_topic
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import BlockNotFound
from web3.types import EventData

from marketplace.chain.errors import ChainError

if TYPE_CHECKING:
    from marketplace.runtime.heads import Head, HeadFeed


@dataclass(frozen=True)
class BlockMark:
    """A block as a cursor read it: its number and its hash (0x-prefixed hex)."""

    number: int
    hash: str


class ChainReorganized(ChainError):
    """The chain no longer has a block the cursor read: logs read from it may be gone or
    different."""

    def __init__(self, block: BlockMark, found: str | None):
        self.block, self.found = block, found
        now = f"now {found}" if found is not None else "now missing"
        super().__init__(f"chain reorganised: block {block.number} was {block.hash}, {now}")


class EventCursor:
    """Polls the logs of several contracts and decodes them with their ABIs.

    `next_block` is the first block not yet read and `last` the last block read with its hash:
    save both, and a restarted daemon resumes exactly where it stopped, with no log missed or seen
    twice. Logs are returned only once `confirmations` blocks bury them; a poll raises
    ChainReorganized when `last` is no longer on the chain, and `fork` finds where to read again.

    With `heads`, a live feed of the node's new blocks, a poll asks nothing of a chain standing
    still, and steps over blocks whose logs bloom rules out every contract followed: a poll asks
    only for the logs of blocks that may hold some. The pushed heads must link, each to the one
    before and the first to `last`; otherwise the poll asks the node, as without a feed.
    """

    def __init__(
        self,
        w3: Web3,
        contracts: list[Contract],
        next_block: int,
        confirmations: int = 0,
        max_range: int = 2_000,
        last: BlockMark | None = None,
        heads: HeadFeed | None = None,
    ):
        self.w3 = w3
        self.heads = heads
        self.next_block = next_block
        self.last = last
        self.time = 0  # the latest block's timestamp at the last poll: the market's clock
        self.confirmations = confirmations
        self.max_range = max_range
        self._addresses = [c.address for c in contracts]
        self._decoders = {}
        for contract in contracts:
            for item in contract.abi:
                if item["type"] == "event":
                    topic = event_abi_to_log_topic(item)
                    self._decoders[(contract.address, topic)] = getattr(
                        contract.events, item["name"]
                    )()

    @property
    def position(self) -> tuple[int, BlockMark | None]:
        return self.next_block, self.last

    def seek(self, next_block: int, last: BlockMark | None) -> None:
        """Read from `next_block` on; `last` is the block before it as it was read (None:
        unchecked)."""
        self.next_block, self.last = next_block, last

    def poll(self) -> list[EventData]:
        """Every new log up to the confirmed head, oldest first; raises ChainReorganized, reading
        nothing, if the chain replaced the last block read."""
        pushed = self._pushed()
        if pushed is not None:
            if not pushed:
                return []  # no block since the last one read: nothing asked
            self.time = pushed[-1].timestamp
            if any(head.may_log(address) for head in pushed for address in self._addresses):
                return self._read(pushed[-1].mark)
            self.next_block, self.last = pushed[-1].number + 1, pushed[-1].mark
            return []
        latest = self.w3.eth.get_block("latest")
        self.time = latest["timestamp"]
        if self.last is not None:
            self._check(self.last, latest)
        head = latest["number"] - self.confirmations
        if self.next_block > head:
            return []  # a chain standing still costs one request a poll
        # The head's hash is taken before its logs: a reorg after this point replaces that block
        # too, so the next poll notices it, whichever branch the logs came from.
        block = latest if self.confirmations == 0 else self.w3.eth.get_block(head)
        return self._read(BlockMark(head, self._hash(block)))

    def _pushed(self) -> list[Head] | None:
        """The heads pushed since the last block read, each the child of the one before and the
        first of `last`; None when the feed cannot vouch for them (no live feed, confirmations,
        a gap, a parent that differs: the node is asked, and a reorg found as without a feed)."""
        if self.heads is None or self.confirmations or self.last is None:
            return None
        if self.next_block != self.last.number + 1:
            return None
        pushed = self.heads.after(self.last.number)
        if not pushed:
            # Nothing above the last block read: the chain stood still if the feed's newest head
            # is that block, unchanged.
            newest = self.heads.newest()
            return [] if pushed is not None and newest and newest.mark == self.last else None
        parent = self.last.hash
        for head in pushed:
            if head.parent_hash != parent:
                return None
            parent = head.hash
        return pushed

    def _read(self, last: BlockMark) -> list[EventData]:
        """The logs of the blocks from `next_block` to `last`, which becomes the last block read."""
        events: list[EventData] = []
        start = self.next_block
        while start <= last.number:
            to_block = min(last.number, start + self.max_range - 1)
            logs = self.w3.eth.get_logs(
                {"fromBlock": start, "toBlock": to_block, "address": self._addresses}
            )
            for raw in logs:
                decoder = self._decoders.get((raw["address"], bytes(raw["topics"][0])))
                if decoder is not None:
                    events.append(decoder.process_log(raw))
            start = to_block + 1
        self.next_block, self.last = last.number + 1, last
        events.sort(key=lambda e: (e["blockNumber"], e["logIndex"]))
        return events

    def _check(self, last: BlockMark, latest) -> None:
        """Raise ChainReorganized if the chain no longer has `last`. The latest block usually
        vouches for it, being that block or its child; otherwise one more request asks."""
        found: str | None
        if latest["number"] == last.number:
            found = self._hash(latest)
        elif latest["number"] == last.number + 1:
            found = "0x" + bytes(latest["parentHash"]).hex()
        else:
            found = self.hash_of(last.number)
        if found != last.hash:
            raise ChainReorganized(last, found)

    def standing_still(self) -> bool:
        """Whether a poll now would find nothing: the latest block is the last one read, unchanged
        (one request, none with a live feed; with confirmations, a poll decides)."""
        if self.last is None or self.confirmations:
            return False
        pushed = self._pushed()
        if pushed is not None:
            return not pushed
        latest = self.w3.eth.get_block("latest")
        return latest["number"] == self.last.number and self._hash(latest) == self.last.hash

    def hash_of(self, number: int) -> str | None:
        """The hash of the chain's block `number` now; None if the chain is shorter."""
        try:
            return self._hash(self.w3.eth.get_block(number))
        except BlockNotFound:
            return None

    def fork(self, read: Iterable[BlockMark]) -> BlockMark | None:
        """The newest of the blocks `read` (newest first) that the chain still has: what was read
        up to it stands, and reading resumes after it. None if the chain has none of them."""
        for mark in read:
            if self.hash_of(mark.number) == mark.hash:
                return mark
        return None

    @staticmethod
    def _hash(block) -> str:
        return "0x" + bytes(block["hash"]).hex()
