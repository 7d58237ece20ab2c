"""The SDK against a deliberately malicious gateway: a proxy in front of the real one that rewrites
the transactions and permits it hands out. Each attack is refused before anything is signed,
nothing is broadcast, and the wallet's ZEN and allowances are untouched; the same requests through
the honest gateway go through."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from eth_utils import to_checksum_address
from hexbytes import HexBytes

from marketplace import AsyncClient
from marketplace.chain.deploy import ZEN
from marketplace.sdk import RefusedToSign

pytestmark = [pytest.mark.anvil, pytest.mark.usefixtures("trusted_manifest")]

SPEC = Path(__file__).parents[2] / "node/specs/tiny.yaml"
ATTACKER = to_checksum_address("0x" + "a7" * 20)
MAX_UINT = 2**256 - 1


class MaliciousGateway(httpx.AsyncBaseTransport):
    """Forwards every request to the real gateway and rewrites the answer of one route."""

    def __init__(self, url: str, route: str, tamper: Callable[[dict], dict]):
        self.inner = httpx.AsyncHTTPTransport()
        self.url = httpx.URL(url)
        self.route, self.tamper = route, tamper
        self.broadcasts = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/transactions":
            self.broadcasts += 1
        request.url = request.url.copy_with(host=self.url.host, port=self.url.port)
        response = await self.inner.handle_async_request(request)
        if request.method != "POST" or request.url.path != self.route or response.is_error:
            return response
        await response.aread()
        body = self.tamper(json.loads(response.content))
        return httpx.Response(response.status_code, json=body)

    async def aclose(self) -> None:
        await self.inner.aclose()


def approve_attacker(ledger) -> Callable[[dict], dict]:
    def tamper(unsigned: dict) -> dict:
        call = ledger.zen.functions.approve(ATTACKER, MAX_UINT)
        return unsigned | {"to": ledger.zen.address, "data": call._encode_transaction_data()}

    return tamper


def double_the_budget(_) -> Callable[[dict], dict]:
    """The right contract and function, the budget's word in the calldata doubled."""

    def tamper(unsigned: dict) -> dict:
        data = bytes(HexBytes(unsigned["data"]))
        budget = (500 * ZEN).to_bytes(32, "big")
        assert data.count(budget) == 1
        doubled = data.replace(budget, (1_000 * ZEN).to_bytes(32, "big"))
        return unsigned | {"data": HexBytes(doubled).to_0x_hex()}

    return tamper


def permit_with(part: str, **changes) -> Callable[[dict], dict]:
    """A permit whose typed data's `part` (domain or message) has `changes`."""

    def tamper(permit: dict) -> dict:
        typed = permit["typed_data"]
        return permit | {"typed_data": typed | {part: typed[part] | changes}}

    return tamper


ATTACKS = {
    "approve(attacker, max) on ZEN": ("/transactions/jobs", approve_attacker),
    "the same call with twice the budget": ("/transactions/jobs", double_the_budget),
    "another chain": ("/transactions/jobs", lambda _: lambda tx: tx | {"chainId": 1}),
    "ETH sent along": ("/transactions/jobs", lambda _: lambda tx: tx | {"value": 10**18}),
    "a fee that drains the wallet": (
        "/transactions/jobs",
        lambda _: lambda tx: tx | {"maxFeePerGas": 10**15, "maxPriorityFeePerGas": 10**15},
    ),
    "a permit for the attacker": (
        "/transactions/permit",
        lambda _: permit_with("message", spender=ATTACKER),
    ),
    "a permit for everything": (
        "/transactions/permit",
        lambda _: permit_with("message", value=str(MAX_UINT)),
    ),
    "a permit of another token": (
        "/transactions/permit",
        lambda _: permit_with("domain", verifyingContract=ATTACKER),
    ),
}


def submit_through(url: str, wallet, transport: httpx.AsyncBaseTransport | None) -> int:
    async def run() -> int:
        async with AsyncClient(
            url, wallet, ipfs_replicas=[], poll_interval=0.2, transport=transport
        ) as client:
            job = await client.train(SPEC, max_budget=500, sample_rate_bps=0)
            return job.id

    return asyncio.run(run())


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_tampered_transaction_or_permit_is_never_signed(attack, served_gateway, ledger, cast):
    route, make = ATTACKS[attack]
    gateway = MaliciousGateway(served_gateway, route, make(ledger))
    user = cast.user.address
    zen_before = ledger.balance(user)
    jobs_before = ledger.market.functions.jobCount().call()

    with pytest.raises(RefusedToSign, match="refused to sign the gateway's"):
        submit_through(served_gateway, cast.user, gateway)

    assert gateway.broadcasts == 0
    assert ledger.balance(user) == zen_before
    assert ledger.zen.functions.allowance(user, ATTACKER).call() == 0
    assert ledger.zen.functions.allowance(user, ledger.market.address).call() == 0
    assert ledger.market.functions.jobCount().call() == jobs_before


def test_the_honest_gateway_s_transaction_is_signed(served_gateway, ledger, cast):
    budget_before = ledger.balance(cast.user.address)
    job_id = submit_through(served_gateway, cast.user, None)
    assert ledger.job(job_id)["budget"] == 500 * ZEN
    assert ledger.balance(cast.user.address) == budget_before - 500 * ZEN
