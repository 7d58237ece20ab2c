"""Name the ledger's contracts by address and decode any transaction's call and logs with their
ABIs, so an explorer can show a transaction it did not send."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eth_utils import event_abi_to_log_topic
from web3 import Web3
from web3.contract import Contract

from marketplace.chain.deploy import Deployment


@dataclass(frozen=True)
class LedgerDecoder:
    contracts: dict[str, tuple[str, Contract]]  # address -> (name, contract)
    topics: dict[bytes, tuple[str, str]]  # topic0 -> (contract name, event name)

    @classmethod
    def of(cls, w3: Web3, deployment: Deployment) -> LedgerDecoder:
        """Every contract of the manifest, and the topic of each of its (named) events."""
        contracts: dict[str, tuple[str, Contract]] = {}
        topics: dict[bytes, tuple[str, str]] = {}
        for name, address in deployment.addresses.items():
            contract = deployment.contract(w3, name)
            contracts[address] = (name, contract)
            for item in contract.abi:
                if item["type"] == "event" and not item.get("anonymous"):
                    topics[event_abi_to_log_topic(item)] = (name, item["name"])
        return cls(contracts, topics)

    def name_of(self, address: str | None) -> str | None:
        known = self.contracts.get(address) if address else None
        return known[0] if known else None

    def decode_call(self, to: str, data: bytes) -> tuple[str, dict[str, Any]]:
        """The function called on the ledger contract at `to` and its arguments. Raises ValueError
        for a selector its ABI does not know, or eth_abi's DecodingError for calldata cut short."""
        fn, args = self.contracts[to][1].decode_function_input(data)
        return fn.fn_name, args

    def decode_log(self, log) -> tuple[str, dict[str, Any]] | None:
        """The event name and arguments of a log one of the ledger's contracts emitted; None for a
        log of any other address, or one whose topic is another contract's event."""
        topics = log["topics"]
        name, event = self.topics.get(bytes(topics[0]), (None, None)) if topics else (None, None)
        if event is None or name != self.name_of(log["address"]):
            return None
        decoded = self.contracts[log["address"]][1].events[event]().process_log(log)
        return event, dict(decoded["args"])
