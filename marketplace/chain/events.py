"""Follow the ledger's events in chain order, each once, from a block a daemon can persist."""

from __future__ import annotations

import logging

from eth_utils import event_abi_to_log_topic
from web3 import Web3
from web3.contract import Contract
from web3.types import EventData

log = logging.getLogger(__name__)


class EventCursor:
    """Polls the logs of several contracts and decodes them with their ABIs.

    `next_block` is the first block not yet read: save it, and a restarted daemon resumes
    exactly where it stopped, with no log missed or seen twice. Logs are returned only once
    `confirmations` blocks bury them.
    """

    def __init__(self, w3: Web3, contracts: list[Contract], next_block: int, confirmations: int = 0,
                 max_range: int = 2_000):
        self.w3 = w3
        self.next_block = next_block
        self.confirmations = confirmations
        self.max_range = max_range
        self._addresses = [c.address for c in contracts]
        self._decoders = {}
        for contract in contracts:
            for item in contract.abi:
                if item["type"] == "event":
                    topic = event_abi_to_log_topic(item)
                    self._decoders[(contract.address, topic)] = getattr(contract.events, item["name"])()

    def poll(self) -> list[EventData]:
        """Every new log up to the confirmed head, oldest first."""
        head = self.w3.eth.block_number - self.confirmations
        events: list[EventData] = []
        while self.next_block <= head:
            to_block = min(head, self.next_block + self.max_range - 1)
            logs = self.w3.eth.get_logs(
                {"fromBlock": self.next_block, "toBlock": to_block, "address": self._addresses}
            )
            for raw in logs:
                decoder = self._decoders.get((raw["address"], bytes(raw["topics"][0])))
                if decoder is not None:
                    events.append(decoder.process_log(raw))
            self.next_block = to_block + 1
        events.sort(key=lambda e: (e["blockNumber"], e["logIndex"]))
        return events
