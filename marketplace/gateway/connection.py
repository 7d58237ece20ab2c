"""The gateway's one link to the chain, opened on first use so that reads from the index need no
RPC."""

from __future__ import annotations

import threading

from requests.exceptions import RequestException
from web3 import Web3

from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import Ledger
from marketplace.config import Settings


class LedgerConnection:
    """The ledger at ZOO_RPC_URL with its manifest; a chain that is down is tried again on the next
    call."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._ledger: Ledger | None = None
        self._lock = threading.Lock()

    def ledger(self) -> Ledger:
        with self._lock:
            if self._ledger is None:
                w3 = Web3(Web3.HTTPProvider(self.settings.rpc_url, request_kwargs={"timeout": 30}))
                try:
                    chain_id = w3.eth.chain_id
                except RequestException:
                    raise ChainError(f"no chain answers at {self.settings.rpc_url}") from None
                self._ledger = Ledger(w3, self.settings.deployment(chain_id))
            return self._ledger
