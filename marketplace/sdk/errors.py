"""What the SDK raises of its own: a gateway's refusal with its message, or no gateway at all (a
job's journey raises the errors of marketplace/protocol/journey.py, NoBids and JobCancelled)."""

from __future__ import annotations

from marketplace.errors import ZooError


class GatewayError(ZooError):
    """The gateway refused a request; `status` is its HTTP status and the message its `detail`."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status


class GatewayUnavailable(GatewayError, ConnectionError):
    """No gateway answers at the URL."""

    def __init__(self, url: str, reason: str):
        super().__init__(0, f"no gateway answers at {url}: {reason}")


class TransactionReverted(GatewayError):
    """A transaction signed here was mined and reverted; the message says what the contract
    refused."""

    def __init__(self, tx_hash: str, block: int, reason: str | None):
        said = f": {reason}" if reason else ""
        super().__init__(0, f"transaction {tx_hash} reverted in block {block}{said}")
        self.tx_hash, self.block = tx_hash, block


class RefusedToSign(ZooError):
    """What a gateway handed over to sign is not what was asked for; nothing was signed."""
