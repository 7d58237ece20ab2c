"""The SDK and the CLI against a served gateway and its indexer: a job trained by scripted
providers, followed, settled and its weights checked against the chain, in the blocking and async
forms and from `zoo-compute jobs` and `train`; and `node`, `verifier` and `wallet` with the gateway
as their only way to the chain."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
import torch
from click.testing import CliRunner

from marketplace import AsyncClient, Client, jobs
from marketplace.chain import tx
from marketplace.chain.anvil import advance_time
from marketplace.chain.deploy import ZEN
from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import Ledger
from marketplace.cli import main
from marketplace.config import Settings
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import Cast
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.terms import JobStatus
from marketplace.sdk import GatewayError, Progress, Settlement
from marketplace.storage import Storage
from marketplace.wallet import import_key

pytestmark = [pytest.mark.anvil, pytest.mark.usefixtures("trusted_manifest")]
SPEC = Path(__file__).parents[2] / "node/specs/tiny.yaml"
UNITS = 6  # the tiny spec's units per node
GPU_SECONDS = 599
T = TypeVar("T")
ORDER = {
    "max_budget": 500,
    "max_price": 100,
    "sample_rate_bps": 0,
    "checkpoint_interval": 3600,
    "unit_gpu_seconds": GPU_SECONDS,
}


def checkpoint(index: int) -> Checkpoint:
    """A small checkpoint whose weights and loss say which unit made it."""
    return Checkpoint(
        {"model": {"weight": torch.full((3,), float(index))}},
        {
            "metrics": {
                "start_step": 50 * index,
                "end_step": 50 * (index + 1),
                "loss": 3.0 - index / 4,
            }
        },
    )


def provide(ledger: Ledger, cast: Cast, storage: Storage, job_id: int) -> None:
    """The providers' side, scripted: bid, win, commit every unit's real checkpoint, let the window
    pass."""
    market = ledger.market.functions
    bids = [
        (p, ledger.commit_bid(p, job_id, price))
        for p, price in zip(cast.providers, (60 * ZEN, 70 * ZEN, 80 * ZEN))
    ]
    advance_time(ledger.w3, market.bidWindow().call() + 1)
    for provider, bid in bids:
        ledger.reveal_bid(provider, bid)
    advance_time(ledger.w3, market.revealWindow().call() + 1)
    try:
        ledger.close_auction(cast.governor, job_id)
    except ChainError:  # a user on the chain path closed the round first: it was past its grace
        pass
    winner = next(p for p in cast.providers if p.address == ledger.slot(job_id, 0)["provider"])
    for index in range(UNITS):
        advance_time(ledger.w3, GPU_SECONDS)
        unit = checkpoint(index)
        cid = storage.add_bytes(unit.to_bytes())
        ledger.commit_checkpoint(winner, job_id, 0, cid, bytes.fromhex(unit.state_hash()))
    advance_time(ledger.w3, ledger.verification.functions.verificationWindow().call() + 1)


@pytest.fixture(scope="module")
def trained(served_gateway, ledger, cast, ipfs_api) -> dict:
    """A job escrowed, followed and settled through the blocking client while scripted providers
    train it."""
    held = ledger.balance(cast.user.address)
    with Client(
        served_gateway, wallet=cast.user, ipfs_api=ipfs_api, ipfs_replicas=[], poll_interval=0.2
    ) as client:
        job = client.train(config=SPEC, **ORDER)
        budget = ledger.job(job.id)["budget"]
        with Storage(ipfs_api) as storage:
            providers = threading.Thread(target=provide, args=(ledger, cast, storage, job.id))
            providers.start()
            seen: list[Progress] = []
            try:
                final = job.wait(on_progress=seen.append)
            finally:
                providers.join()
    return {
        "id": job.id,
        "final": final,
        "seen": seen,
        "budget": budget,
        "spent": held - ledger.balance(cast.user.address),
    }


def test_train_wait_result_with_the_blocking_client(
    trained, served_gateway, cast, ipfs_api, tmp_path
):
    final, seen = trained["final"], trained["seen"]
    assert trained["budget"] == 500 * ZEN and final["status"] == "settled"
    assert (seen[-1].units_done, seen[-1].units_total, seen[-1].loss) == (UNITS, UNITS, 3.0 - 5 / 4)
    payment = UNITS * (GPU_SECONDS * int(final["clearing_price"]) // 3600)
    assert int(final["settlement"]["payment"]) == payment == trained["spent"]

    with Client(
        served_gateway, wallet=cast.user, ipfs_api=ipfs_api, ipfs_replicas=[], poll_interval=0.2
    ) as client:
        job = client.handle(trained["id"])
        result = job.result(tmp_path / "weights.pt")
        assert torch.equal(torch.load(result.path)["weight"], torch.full((3,), 5.0))
        assert result.state_hash == "0x" + checkpoint(UNITS - 1).state_hash()
        shown = client.request("GET", f"/jobs/{job.id}/result")
        assert (shown["final"], shown["state_verified"]) == (True, True)
        assert [u["end_step"] for u in client.metrics(job.id)["units"]] == [
            50 * (i + 1) for i in range(UNITS)
        ]

        client.post_logs(job.id, ["queued", "done"])
        assert [line["line"] for line in job.logs(follow=True)] == ["queued", "done"]
        for first in range(0, 250, 100):  # a post holds 100 lines; 250 is more than a page of 200
            client.post_logs(job.id, [f"step {i}" for i in range(first, min(first + 100, 250))])
        assert [line["line"] for line in job.logs()] == [
            "queued",
            "done",
            *(f"step {i}" for i in range(250)),
        ]
        assert len(client.logs(job.id)) == 200
        with (
            pytest.raises(GatewayError, match="neither the user nor a provider"),
            Client(served_gateway, wallet=cast.verifiers[0]) as stranger,
        ):
            stranger.post_logs(job.id, ["spam"])

    async def follow_async() -> dict:
        async with AsyncClient(served_gateway) as aclient:
            return await aclient.handle(trained["id"]).wait()

    assert asyncio.run(follow_async())["settlement"] == final["settlement"]


def test_refusals_are_one_message(served_gateway, cast, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.read_text().replace("n_head: 4", "n_head: 5"))
    with Client(served_gateway, wallet=cast.user) as client:
        with pytest.raises(GatewayError, match="model.n_head") as refused:
            client.train(config=bad, max_budget=500)
        assert refused.value.status == 400
        with pytest.raises(GatewayError, match="below the reserve"):
            client.train(config=SPEC, max_budget=0.001)
        with pytest.raises(GatewayError, match="not indexed"):
            client.job(10**9)
    with pytest.raises(GatewayError, match="needs a wallet"), Client(served_gateway) as anonymous:
        anonymous.train(config=SPEC, max_budget=500)


def test_jobs_cli_lists_shows_follows_fetches_and_cancels(
    trained, served_gateway, ledger, cast, ipfs_api, tmp_path
):
    _, keystore = import_key(Settings(home=tmp_path), cast.user.key.hex(), "secret")
    env = {
        "ZOO_HOME": str(tmp_path),
        "ZOO_WALLET": str(keystore),
        "ZOO_WALLET_PASSWORD": "secret",
        "ZOO_IPFS_API": ipfs_api,
        "ZOO_IPFS_REPLICAS": "[]",
        "ZOO_GATEWAY_URL": served_gateway,
    }
    runner = CliRunner()

    def jobs(*args: str) -> str:
        result = runner.invoke(main, ["jobs", *args], env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    job_id = trained["id"]
    assert job_id in [row["job_id"] for row in json.loads(jobs("list", "--mine", "--json"))]
    shown = json.loads(jobs("show", str(job_id), "--json"))
    assert (shown["status"], shown["metrics"]["units_done"]) == ("settled", UNITS)
    assert "settled" in jobs("show", str(job_id)) and "refund" in jobs("show", str(job_id))
    with Client(served_gateway, wallet=cast.user) as client:
        client.post_logs(job_id, ["read by the cli"])
        posted = [line["line"] for line in client.handle(job_id).logs()]
    logged = [json.loads(line)["line"] for line in jobs("logs", str(job_id), "--json").splitlines()]
    assert logged == posted and logged[-1] == "read by the cli"
    fetched = json.loads(jobs("result", str(job_id), "--output", str(tmp_path / "w.pt"), "--json"))
    assert (
        fetched["state_hash"] == "0x" + checkpoint(UNITS - 1).state_hash()
        and (tmp_path / "w.pt").exists()
    )

    with Client(served_gateway, wallet=cast.user) as client:
        unfilled = client.train(config=SPEC, **ORDER).id
    cancelled = json.loads(jobs("cancel", str(unfilled), "--json"))
    assert cancelled["status"] == "succeeded"
    assert ledger.market.functions.status(unfilled).call() == JobStatus.CANCELLED
    settled = runner.invoke(main, ["jobs", "cancel", str(job_id)], env=env)
    assert settled.exit_code == 1 and settled.output.strip().splitlines() == [
        (
            f"Error: POST /transactions/jobs/{job_id}/cancel: "
            f"Job {job_id} is settled, which does not allow this."
        )
    ]

    missing = runner.invoke(main, ["jobs", "show", "999999"], env=env)
    assert missing.exit_code == 1 and missing.output.strip().splitlines() == [
        "Error: GET /jobs/999999: job 999999 is not indexed"
    ]
    nowhere = runner.invoke(main, ["jobs", "--gateway", "http://127.0.0.1:9", "list"], env=env)
    assert nowhere.exit_code == 1 and "no gateway answers at http://127.0.0.1:9" in nowhere.output


def train_while_the_providers_work(
    ledger: Ledger, cast: Cast, ipfs_api: str, env: dict[str, str], output: Path
) -> tuple[str, int]:
    """`zoo-compute train` with `env` while the scripted providers train the job it escrows: its
    output, and the job's id."""
    before = ledger.market.functions.jobCount().call()

    def provide_the_next_job() -> None:
        while ledger.market.functions.jobCount().call() == before:
            time.sleep(0.1)
        with Storage(ipfs_api) as storage:
            provide(ledger, cast, storage, before + 1)

    providers = threading.Thread(target=provide_the_next_job)
    providers.start()
    try:
        result = CliRunner().invoke(
            main,
            [
                "train",
                "--config",
                str(SPEC),
                "--max-budget",
                "500",
                "--sample-rate",
                "0",
                "--checkpoint-interval",
                "3600",
                "--output",
                str(output),
            ],
            env=env,
        )
    finally:
        providers.join()
    assert result.exit_code == 0, result.output
    return result.output, before + 1


def assert_the_journey_was_shown(output: str, job_id: int, weights: Path) -> None:
    assert f"job {job_id}: tiny-stdlib-gpt, budget 500.000000 ZEN escrowed" in output
    assert "auction cleared at 60.000000 ZEN per GPU-hour" in output
    assert "weights written to" in output and "settled in block" in output
    assert torch.equal(torch.load(weights)["weight"], torch.full((3,), 5.0))


def test_train_cli_goes_through_the_gateway_when_one_is_configured(
    served_gateway, ledger, cast, ipfs_api, tmp_path
):
    env = gateway_only_env(
        cast.user, served_gateway, ipfs_api, tmp_path
    )  # the gateway is the only way to the chain
    output, job_id = train_while_the_providers_work(ledger, cast, ipfs_api, env, tmp_path / "w.pt")
    assert_the_journey_was_shown(output, job_id, tmp_path / "w.pt")


def chain_only_env(account, ledger: Ledger, ipfs_api: str, home: Path) -> dict[str, str]:
    """A user whose keystore holds `account` and who sends to the ledger itself: no gateway."""
    _, keystore = import_key(Settings(home=home), account.key.hex(), "secret")
    return {
        "ZOO_HOME": str(home),
        "ZOO_WALLET": str(keystore),
        "ZOO_WALLET_PASSWORD": "secret",
        "ZOO_IPFS_API": ipfs_api,
        "ZOO_IPFS_REPLICAS": "[]",
        "ZOO_GATEWAY_URL": "",
        "ZOO_RPC_URL": ledger.w3.provider.endpoint_uri,
        "ZOO_MANIFEST": str(ledger.deployment.write(home / "deployment.json")),
    }


@pytest.mark.usefixtures("story")  # the providers onboarded
def test_train_cli_without_a_gateway_takes_the_same_journey_on_the_chain(
    ledger, cast, ipfs_api, tmp_path
):
    env = chain_only_env(cast.user, ledger, ipfs_api, tmp_path)
    output, job_id = train_while_the_providers_work(ledger, cast, ipfs_api, env, tmp_path / "w.pt")
    assert_the_journey_was_shown(output, job_id, tmp_path / "w.pt")
    assert ledger.market.functions.status(job_id).call() == JobStatus.SETTLED


@pytest.mark.parametrize("way", ["gateway", "chain"])
def test_train_cli_cancels_an_auction_nobody_fills_for_a_full_refund_either_way(
    way, served_gateway, ledger, cast, ipfs_api, tmp_path
):
    env = (
        gateway_only_env(cast.user, served_gateway, ipfs_api, tmp_path)
        if way == "gateway"
        else chain_only_env(cast.user, ledger, ipfs_api, tmp_path)
    )
    held = ledger.balance(cast.user.address)
    result = CliRunner().invoke(
        main,
        [
            "train",
            "--config",
            str(SPEC),
            "--max-budget",
            "500",
            "--tier",
            "gold",
            "--auction-timeout",
            "1",
        ],
        env=env,
    )  # no provider of the Gold tier exists
    job_id = ledger.market.functions.jobCount().call()
    assert result.exit_code == 1, result.output
    assert re.search(
        f"Error: no bids filled job {job_id} within \\d+s: cancelled, 500.000000 ZEN refunded to "
        f"{cast.user.address}$",
        result.output.strip(),
    ), result.output
    assert ledger.market.functions.status(job_id).call() == JobStatus.CANCELLED
    assert ledger.balance(cast.user.address) == held


def gateway_only_env(account, served_gateway: str, ipfs_api: str, home: Path) -> dict[str, str]:
    """A participant whose keystore holds `account` and whose only way to the chain is the
    gateway."""
    _, keystore = import_key(Settings(home=home), account.key.hex(), "secret")
    return {
        "ZOO_HOME": str(home),
        "ZOO_WALLET": str(keystore),
        "ZOO_WALLET_PASSWORD": "secret",
        "ZOO_IPFS_API": ipfs_api,
        "ZOO_IPFS_REPLICAS": "[]",
        "ZOO_GATEWAY_URL": served_gateway,
        "ZOO_RPC_URL": "http://127.0.0.1:9",
    }


def invoke(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.output


def said(env: dict[str, str], *args: str) -> str:
    """The command's output as one line: the console wraps long lines at the terminal's width."""
    return " ".join(invoke(env, *args).split())


def rows(table: str) -> dict[str, str]:
    """A printed two-column table's rows, label to value."""
    cells = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in table.splitlines()
        if "│" in line
    ]
    return {label: value for label, value in cells}


def test_jobs_result_wait_shows_the_journey_as_train_does(
    trained, served_gateway, cast, ipfs_api, tmp_path
):
    env = gateway_only_env(cast.user, served_gateway, ipfs_api, tmp_path)
    shown = said(
        env, "jobs", "result", str(trained["id"]), "--wait", "--output", str(tmp_path / "w.pt")
    )
    assert "auction cleared at 60.000000 ZEN per GPU-hour" in shown
    assert f"{UNITS}/{UNITS} units loss {3.0 - 5 / 4:.3f}" in shown
    assert f"weights written to {tmp_path / 'w.pt'}" in shown


def test_node_verifier_and_wallet_cli_go_through_the_gateway(
    trained, served_gateway, ledger, cast, ipfs_api, tmp_path
):
    provider, verifier = devnet_account(7), devnet_account(8)  # fresh: the story onboarded 1 to 6
    for account in (provider, verifier):
        ledger.transfer(cast.governor, account.address, 6_000 * ZEN)
    env = gateway_only_env(provider, served_gateway, ipfs_api, tmp_path / "provider")
    eth = (
        ledger.w3.eth.get_balance(provider.address) / 10**18
    )  # other suites may have spent some gas
    assert invoke(env, "wallet", "balance").splitlines()[1:] == [
        f"ETH {eth:>24,.6f}",
        f"ZEN {6_000:>24,.6f}",
    ]

    assert "waiting for a verifier's attestation" in said(
        env, "node", "register", "--replicas", "1"
    )
    assert "total 1,500.000000" in said(env, "node", "stake", "--amount", "1500")
    account = ledger.staking_account(provider.address)
    assert (account["role"], account["staked"]) == (1, 1_500 * ZEN)
    status = rows(invoke(env, "node", "status"))
    assert (status["registered"], status["tier"], status["staked ZEN"], status["jobs held"]) == (
        "yes",
        "community",
        "1,500.000000",
        "none",
    )
    assert status["admitted"].startswith("no")
    assert invoke(env, "node", "withdraw").strip() == "nothing owed"
    too_much = CliRunner().invoke(main, ["node", "stake", "--amount", "1000000"], env=env)
    assert too_much.exit_code == 1 and len(too_much.output.strip().splitlines()) == 1
    assert "the stake needs 1,000,000.000000" in too_much.output

    env = gateway_only_env(verifier, served_gateway, ipfs_api, tmp_path / "verifier")
    invoke(env, "verifier", "register", "--endpoint", "https://verifier.example")
    assert "stakes 5,000.000000 ZEN" in said(env, "verifier", "stake", "--amount", "5000")
    assert ledger.staking.functions.isActiveVerifier(verifier.address).call()
    assert rows(invoke(env, "verifier", "status"))["registered"] == "yes"

    winner = cast.providers[
        0
    ]  # the lowest bidder: it trained the job and has not withdrawn its pay
    owed = ledger.owed(winner.address)
    env = gateway_only_env(winner, served_gateway, ipfs_api, tmp_path / "winner")
    assert owed and rows(invoke(env, "node", "status"))["owed ZEN"] == f"{owed / ZEN:,.6f}"
    assert invoke(env, "node", "withdraw").strip() == f"withdrew {owed / ZEN:,.6f} ZEN"
    assert ledger.owed(winner.address) == 0


def test_sdk_unstakes_and_reads_accounts(served_gateway, ledger, cast):
    provider = cast.providers[2]
    with Client(served_gateway, wallet=provider) as client:
        before = client.account()
        client.unstake(100)
        after = client.account(provider.address)
        assert int(after["unbonding"]) - int(before["unbonding"]) == 100 * ZEN
        assert int(before["staked"]) - int(after["staked"]) == 100 * ZEN
        with pytest.raises(
            GatewayError, match="Your unbonding stake can be withdrawn from .*, not yet"
        ) as refused:
            client.withdraw_stake()
        assert refused.value.status == 409
        assert client.provider(provider.address)["address"] == provider.address


def settle_behind_a_provider(
    ledger: Ledger, cast: Cast, job_id: int, settle: Callable[[], T]
) -> tuple[T, str]:
    """Run `settle` (the user's way of settling) while a provider's settle lands first in the same
    block: the user's transaction is sent, the provider's follows with a higher tip, and one block
    mines both. What `settle` returned, and the user's (reverted) transaction."""
    w3, market = ledger.w3, ledger.market.functions
    provider = next(p for p in cast.providers if p.address == ledger.slot(job_id, 0)["provider"])
    w3.provider.make_request("evm_setAutomine", [False])
    try:
        with ThreadPoolExecutor(1) as pool:
            user = pool.submit(settle)
            (users_tx,) = pending_transactions(w3, count=1)
            ahead = tx.build(w3, market.settle(job_id), provider.address)
            ahead["maxPriorityFeePerGas"] = users_tx["maxPriorityFeePerGas"] * 10
            ahead["maxFeePerGas"] = users_tx["maxFeePerGas"] + ahead["maxPriorityFeePerGas"]
            w3.eth.send_raw_transaction(provider.sign_transaction(ahead).raw_transaction)
            pending_transactions(w3, count=2)
            w3.provider.make_request("evm_mine", [])
            outcome = user.result(timeout=120)
    finally:
        w3.provider.make_request("evm_setAutomine", [True])
    block = w3.eth.get_block("latest", full_transactions=True)
    assert [t["from"] for t in block["transactions"]] == [provider.address, cast.user.address]
    assert [w3.eth.get_transaction_receipt(t["hash"])["status"] for t in block["transactions"]] == [
        1,
        0,
    ]
    return outcome, users_tx["hash"].to_0x_hex()


def pending_transactions(w3, count: int, timeout: float = 60) -> list[dict]:
    """The pool's transactions once it holds `count` of them."""
    deadline = time.monotonic() + timeout
    while True:
        content = w3.provider.make_request("txpool_content", [])["result"]["pending"]
        found = [
            w3.eth.get_transaction(t["hash"])
            for by_nonce in content.values()
            for t in by_nonce.values()
        ]
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{len(found)} of {count} transactions reached the pool"
        time.sleep(0.1)


def completed_job(ledger: Ledger, cast: Cast, client: Client, ipfs_api: str) -> int:
    """A job escrowed through the gateway, trained by the scripted providers, its verification
    window over."""
    job = client.train(config=SPEC, **ORDER)
    with Storage(ipfs_api) as storage:
        provide(ledger, cast, storage, job.id)
    assert ledger.market.functions.status(job.id).call() == JobStatus.COMPLETED
    return job.id


def test_the_sdk_settles_a_job_a_provider_settles_in_the_same_block(
    served_gateway, ledger, cast, ipfs_api
):
    with Client(
        served_gateway, wallet=cast.user, ipfs_api=ipfs_api, ipfs_replicas=[], poll_interval=0.2
    ) as client:
        job_id = completed_job(ledger, cast, client, ipfs_api)
        held = ledger.balance(cast.user.address)
        final, lost = settle_behind_a_provider(ledger, cast, job_id, client.handle(job_id).wait)
        assert final["status"] == "settled"
        assert ledger.balance(cast.user.address) == held + int(final["settlement"]["refund"])
        said = client.request("GET", f"/transactions/status/{lost}")
        assert (said["status"], said["error"]) == (
            "reverted",
            f"Job {job_id} is settled, which does not allow this.",
        )


def test_the_chain_path_settles_a_job_a_provider_settles_in_the_same_block(
    served_gateway, ledger, cast, ipfs_api
):
    with Client(
        served_gateway, wallet=cast.user, ipfs_api=ipfs_api, ipfs_replicas=[], poll_interval=0.2
    ) as client:
        job_id = completed_job(ledger, cast, client, ipfs_api)
    held = ledger.balance(cast.user.address)
    job = jobs.ChainJob(ledger, cast.user, job_id, poll=0.2)

    def settle() -> Settlement:
        job.wait()
        return job.settlement()

    settlement, _ = settle_behind_a_provider(ledger, cast, job_id, settle)
    assert settlement.block == ledger.w3.eth.block_number
    assert ledger.balance(cast.user.address) == held + settlement.refund
    assert settlement.payment == UNITS * (GPU_SECONDS * ledger.slot(job_id, 0)["price"] // 3600)
