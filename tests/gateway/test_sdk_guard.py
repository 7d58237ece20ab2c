"""The SDK and the CLI against a deliberately malicious gateway. First a proxy in front of the real
gateway that rewrites the train routes' transaction and permit; then a forging server, a real HTTP
server in front of it, that answers every other route the SDK signs for (stake, unstake, both
withdrawals, registrations, cancel, settle, registry publishing) with the call asked for made
another: another contract, another function, other arguments, another chain, or a permit for
the attacker. Each is refused before anything is signed, nothing is broadcast, and the wallet's
ZEN and allowances are untouched; the CLI says so in one line, without a traceback. The same
requests, untampered, are signed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

import httpx
import pytest
from eth_utils import function_abi_to_4byte_selector, to_checksum_address
from hexbytes import HexBytes

from marketplace import AsyncClient, wallet
from marketplace.chain.deploy import ZEN
from marketplace.chain.ledger import Hardware
from marketplace.chain.permit import split_signature
from marketplace.chain.registry import Registry, kind_named
from marketplace.config import Settings
from marketplace.sdk import GatewayError, RefusedToSign

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


# --- every other route the SDK and the CLI sign for, behind a real forging server -------------


class ForgingGateway:
    """An attacker's gateway: a real HTTP server on a free loopback port in front of the honest
    one. It answers `route` itself with `answer(request body, the honest gateway's answer)`, sends
    no signed transaction on (it counts them and refuses them, so nothing reaches the chain even
    when the client signs), and passes every other request to the honest gateway."""

    def __init__(self, upstream: str, route: str, answer: Callable[[dict, Callable], dict]):
        self.upstream, self.route, self.answer = upstream, route, answer
        self.broadcasts = self.answered = 0
        self.server = _Server(("127.0.0.1", 0), _Forwarder)
        self.server.gateway = self
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Self:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_) -> None:
        self.server.shutdown()
        self.server.server_close()

    def forward(self, method: str, path: str, body: bytes, headers) -> httpx.Response:
        kept = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
        return httpx.request(method, self.upstream + path, content=body, headers=kept, timeout=60)


class _Server(ThreadingHTTPServer):
    gateway: ForgingGateway


class _Forwarder(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        gateway = self.server.gateway
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.command == "POST" and self.path == "/transactions":
            gateway.broadcasts += 1
            return self._reply(400, {"detail": "this gateway sends nothing on"})
        if self.command == "POST" and self.path == gateway.route:
            gateway.answered += 1

            def honest() -> dict:
                return gateway.forward("POST", self.path, body, self.headers).json()

            return self._reply(200, gateway.answer(json.loads(body), honest))
        response = gateway.forward(self.command, self.path, body, self.headers)
        kind = response.headers.get("content-type", "application/json")
        self._reply(response.status_code, response.content, kind)

    def _reply(self, status: int, body, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def unsigned(ledger, call, sender: str) -> dict:
    """What an honest gateway hands over for `call`, built without a gas estimate: the forged
    routes need no chain state that lets the call succeed, since nothing is sent."""
    built = call.build_transaction(
        {
            "from": sender,
            "chainId": ledger.deployment.chain_id,
            "nonce": ledger.w3.eth.get_transaction_count(sender),
            "gas": 500_000,
            "maxFeePerGas": 2 * 10**9,
            "maxPriorityFeePerGas": 10**9,
            "value": 0,
        }
    )
    return dict(built) | {"data": HexBytes(built["data"]).to_0x_hex()}


def permit_args(permit: dict) -> tuple:
    return (int(permit["deadline"]), *split_signature(bytes(HexBytes(permit["signature"]))))


def registry_call(ledger, body: dict, cid: str | None = None):
    return Registry(ledger.w3, ledger.deployment).publish_call(
        kind_named(body["kind"]), body["name"], cid or body["cid"], body["license"]
    )


HARDWARE = Hardware("cpu", 0, 0, 1, "", bytes(32))
ANOTHER_CID = "QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN"  # b"hello\n", not what was pushed


def hardware_of(body: dict, endpoint: str | None = None) -> Hardware:
    return Hardware(
        body["gpu_model"],
        body["gpus"],
        body["gpu_memory_gb"],
        body["network_gbps"],
        body["endpoint"] if endpoint is None else endpoint,
        bytes(HexBytes(body["attestation"])),
    )


@dataclass(frozen=True)
class Route:
    """A route the SDK signs the answer of: what the SDK is asked to do, the call it asked the
    gateway for (built from the request), and the same function with arguments an attacker
    prefers (None for a function without arguments)."""

    path: str
    act: Callable[[AsyncClient, Path], Awaitable]
    call: Callable
    changed: Callable | None


ROUTES = {
    "stake": Route(
        "/transactions/stake",
        lambda client, _: client.stake(5),
        lambda ledger, b: ledger.stake_call(int(b["amount"]), permit_args(b["permit"])),
        lambda ledger, b: ledger.stake_call(2 * int(b["amount"]), permit_args(b["permit"])),
    ),
    "unstake": Route(
        "/transactions/unstake",
        lambda client, _: client.unstake(5),
        lambda ledger, b: ledger.request_unstake_call(int(b["amount"])),
        lambda ledger, b: ledger.request_unstake_call(2 * int(b["amount"])),
    ),
    "withdraw stake": Route(
        "/transactions/stake/withdraw",
        lambda client, _: client.withdraw_stake(),
        lambda ledger, _: ledger.withdraw_stake_call(),
        None,
    ),
    "withdraw pay": Route(
        "/transactions/withdraw",
        lambda client, _: client.withdraw(),
        lambda ledger, _: ledger.withdraw_call(),
        None,
    ),
    "register a provider": Route(
        "/transactions/providers",
        lambda client, _: client.register_provider(HARDWARE),
        lambda ledger, b: ledger.register_provider_call(b["tier"], hardware_of(b)),
        lambda ledger, b: ledger.register_provider_call(b["tier"], hardware_of(b, "tcp://a:1")),
    ),
    "register a verifier": Route(
        "/transactions/verifiers",
        lambda client, _: client.register_verifier("tcp://verifier:1"),
        lambda ledger, b: ledger.register_verifier_call(b["endpoint"]),
        lambda ledger, _: ledger.register_verifier_call("tcp://attacker:1"),
    ),
    "cancel a job": Route(
        "/transactions/jobs/1/cancel",
        lambda client, _: client.handle(1).cancel(),
        lambda ledger, _: ledger.cancel_job_call(1),
        lambda ledger, _: ledger.cancel_job_call(2),
    ),
    "settle a job": Route(
        "/transactions/jobs/1/settle",
        lambda client, _: client.handle(1)._try_settle(),  # what job.wait() calls
        lambda ledger, _: ledger.settle_call(1),
        lambda ledger, _: ledger.settle_call(2),
    ),
    "publish to the registry": Route(
        "/transactions/registry",
        lambda client, folder: client.push(
            "dataset", write(folder / "data.txt"), name="zoo/hostile-data", license="MIT"
        ),
        registry_call,
        lambda ledger, b: registry_call(ledger, b, cid=ANOTHER_CID),
    ),
}


def write(path: Path) -> Path:
    path.write_text("a dataset\n")
    return path


def contract_at(ledger, address: str):
    contracts = (ledger.zen, ledger.staking, ledger.market, ledger.verification)
    registry = Registry(ledger.w3, ledger.deployment).contract
    return next(c for c in (*contracts, registry) if c.address == to_checksum_address(address))


def inputs(function: dict) -> list[str]:
    return [argument["type"] for argument in function["inputs"]]


def another_function(ledger, tx: dict) -> dict:
    """The same contract and arguments under another of its functions' selectors: one taking
    the same argument types where the contract has one (unstake made stake, cancel made settle)."""
    data = bytes(HexBytes(tx["data"]))
    functions = [f for f in contract_at(ledger, tx["to"]).abi if f["type"] == "function"]
    own = next(f for f in functions if function_abi_to_4byte_selector(f) == data[:4])
    others = [f for f in functions if function_abi_to_4byte_selector(f) != data[:4]]
    same = [f for f in others if inputs(f) == inputs(own)]
    selector = function_abi_to_4byte_selector((same or others)[0])
    return tx | {"data": HexBytes(selector + data[4:]).to_0x_hex()}


TAMPERS: dict[str, Callable] = {
    "another contract": lambda ledger, route, body, tx: tx | {"to": ledger.zen.address},
    "another function": lambda ledger, route, body, tx: another_function(ledger, tx),
    "other arguments": lambda ledger, route, body, tx: unsigned(
        ledger, route.changed(ledger, body), tx["from"]
    ),
    "another chain": lambda ledger, route, body, tx: tx | {"chainId": 1},
}
CASES = [
    (route, tamper)
    for route in ROUTES
    for tamper in TAMPERS
    if not (tamper == "other arguments" and ROUTES[route].changed is None)
]
PERMIT_TAMPERS = {
    "a permit for the attacker": permit_with("message", spender=ATTACKER),
    "a permit for twice the amount": permit_with("message", value=str(10 * ZEN)),
    "a permit on another chain": permit_with("domain", chainId=1),
    "a permit of another token": permit_with("domain", verifyingContract=ATTACKER),
}


def forger(ledger, route: Route, tamper: Callable | None):
    """The gateway's answer on `route`: the call asked for, built here, then tampered."""

    def answer(body: dict, _honest) -> dict:
        tx = unsigned(ledger, route.call(ledger, body), body["sender"])
        return tx if tamper is None else tamper(ledger, route, body, tx)

    return answer


def act_through(gateway: ForgingGateway, signer, act, folder: Path, ipfs_api: str):
    async def run():
        async with AsyncClient(
            gateway.url, signer, ipfs_api=ipfs_api, ipfs_replicas=[], poll_interval=0.2
        ) as client:
            return await act(client, folder)

    return asyncio.run(run())


@pytest.mark.parametrize(("route", "tamper"), CASES)
def test_every_route_s_tampered_transaction_is_refused_unsigned(
    route, tamper, served_gateway, ledger, cast, ipfs_api, tmp_path
):
    chosen = ROUTES[route]
    answer = forger(ledger, chosen, TAMPERS[tamper])
    with (
        ForgingGateway(served_gateway, chosen.path, answer) as gateway,
        pytest.raises(RefusedToSign, match="refused to sign the gateway's"),
    ):
        act_through(gateway, cast.user, chosen.act, tmp_path, ipfs_api)
    assert (gateway.answered, gateway.broadcasts) == (1, 0)


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_s_honest_transaction_is_signed(
    route, served_gateway, ledger, cast, ipfs_api, tmp_path
):
    """The same forging server without the tampering: the SDK signs and sends, so what the
    attacks above meet is the check, not the server."""
    chosen = ROUTES[route]
    with (
        ForgingGateway(served_gateway, chosen.path, forger(ledger, chosen, None)) as gateway,
        pytest.raises(GatewayError, match="this gateway sends nothing on"),
    ):
        act_through(gateway, cast.user, chosen.act, tmp_path, ipfs_api)
    assert (gateway.answered, gateway.broadcasts) == (1, 1)


@pytest.mark.parametrize("tamper", list(PERMIT_TAMPERS))
def test_a_tampered_stake_permit_is_refused_unsigned(
    tamper, served_gateway, ledger, cast, ipfs_api, tmp_path
):
    def answer(_body: dict, honest) -> dict:
        return PERMIT_TAMPERS[tamper](honest())

    with (
        ForgingGateway(served_gateway, "/transactions/permit", answer) as gateway,
        pytest.raises(RefusedToSign, match="refused to sign the gateway's permit"),
    ):
        act_through(gateway, cast.user, ROUTES["stake"].act, tmp_path, ipfs_api)
    assert (gateway.answered, gateway.broadcasts) == (1, 0)
    assert ledger.zen.functions.allowance(cast.user.address, ATTACKER).call() == 0


# --- the CLI itself, with the forging server as its gateway ------------------------------------

PASSWORD = "hostile gateway password"

CLI_ATTACKS = {
    "node stake: a permit for the attacker": (
        ["node", "stake", "--amount", "5"],
        "/transactions/permit",
        lambda ledger: lambda _body, honest: permit_with("message", spender=ATTACKER)(honest()),
        "refused to sign the gateway's permit: spender",
    ),
    "verifier stake: another chain": (
        ["verifier", "stake", "--amount", "5"],
        "/transactions/stake",
        lambda ledger: forger(ledger, ROUTES["stake"], TAMPERS["another chain"]),
        "refused to sign the gateway's stakeWithPermit transaction: chain 1",
    ),
    "verifier register: another contract": (
        ["verifier", "register", "--endpoint", "tcp://verifier:1"],
        "/transactions/verifiers",
        lambda ledger: forger(ledger, ROUTES["register a verifier"], TAMPERS["another contract"]),
        "refused to sign the gateway's registerVerifier transaction: it calls",
    ),
    "jobs cancel: another job": (
        ["jobs", "cancel", "1"],
        "/transactions/jobs/1/cancel",
        lambda ledger: forger(ledger, ROUTES["cancel a job"], TAMPERS["other arguments"]),
        "refused to sign the gateway's cancelJob transaction: its calldata",
    ),
}


@pytest.fixture
def cli_home(cast, tmp_path) -> Path:
    """The user's wallet in a keystore, as `zoo-compute wallet import` leaves it."""
    home = tmp_path / "home"
    wallet.import_key(Settings(home=home), cast.user.key.to_0x_hex(), PASSWORD)
    return home


@pytest.mark.parametrize("attack", list(CLI_ATTACKS))
def test_the_cli_refuses_a_tampered_transaction_in_one_line(
    attack, served_gateway, ledger, cast, ipfs_api, cli_home
):
    args, route, make, said = CLI_ATTACKS[attack]
    zen_before = ledger.balance(cast.user.address)
    with ForgingGateway(served_gateway, route, make(ledger)) as gateway:
        env = os.environ | {
            "ZOO_HOME": str(cli_home),
            "ZOO_WALLET_PASSWORD": PASSWORD,
            "ZOO_GATEWAY_URL": gateway.url,
            "ZOO_IPFS_API": ipfs_api,
            "ZOO_IPFS_REPLICAS": "[]",
        }
        done = subprocess.run(
            [sys.executable, "-m", "marketplace.cli", *args],
            env=env,
            cwd=cli_home,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"Error: {said}"), line
    assert (gateway.answered, gateway.broadcasts) == (1, 0)
    assert ledger.balance(cast.user.address) == zen_before
    assert ledger.zen.functions.allowance(cast.user.address, ATTACKER).call() == 0
