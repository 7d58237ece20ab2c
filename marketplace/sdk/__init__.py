"""The Zoo Compute SDK: a gateway's client that signs with the user's own wallet, in async and
blocking forms."""

from marketplace.protocol.journey import JobCancelled, NoBids, Progress, Result, Settlement
from marketplace.sdk.aio import AsyncClient, AsyncJob
from marketplace.sdk.errors import (
    GatewayError,
    GatewayUnavailable,
    RefusedToSign,
    TransactionReverted,
)
from marketplace.sdk.sync import Client, Job

__all__ = [
    "AsyncClient",
    "AsyncJob",
    "Client",
    "GatewayError",
    "GatewayUnavailable",
    "Job",
    "JobCancelled",
    "NoBids",
    "Progress",
    "RefusedToSign",
    "Result",
    "Settlement",
    "TransactionReverted",
]
