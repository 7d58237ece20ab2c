"""The Zoo Compute SDK: a gateway's client that signs with the user's own wallet, in async and blocking forms."""

from marketplace.sdk.aio import AsyncClient, AsyncJob, Result
from marketplace.sdk.errors import (
           GatewayError,
           GatewayUnavailable,
           JobCancelled,
           NoBids,
           TransactionReverted,
)
from marketplace.sdk.sync import Client, Job

__all__ = ["AsyncClient", "AsyncJob", "Client", "GatewayError", "GatewayUnavailable", "Job", "JobCancelled",
           "NoBids", "Result", "TransactionReverted"]
