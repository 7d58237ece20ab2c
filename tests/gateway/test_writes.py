"""The write side on a real Anvil and IPFS node: sign-in sessions, uploads, logs, and transactions
the user signs."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from eth_account.messages import encode_defunct
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from marketplace.chain.deploy import ZEN
from marketplace.devnet.accounts import devnet_account
from marketplace.gateway import db
from marketplace.gateway.api.main import create_app
from marketplace.gateway.db import open_database
from marketplace.gateway.siwe import SiweMessage
from marketplace.protocol.terms import JobStatus
from marketplace.storage import Storage

pytestmark = pytest.mark.anvil
SPEC = (Path(__file__).parents[2] / "node/specs/tiny.yaml").read_text()


def siwe_text(client, account, **changes) -> str:
    nonce = client.get("/auth/nonce").json()
    fields = {
        "domain": "testserver",
        "address": account.address,
        "uri": "http://testserver/",
        "chain_id": nonce["chain_id"],
        "nonce": nonce["nonce"],
        "issued_at": datetime.now(UTC),
        "expiration_time": datetime.now(UTC) + timedelta(minutes=10),
    } | changes
    return SiweMessage(**fields).text()


def sign_in(client, account, **changes) -> dict:
    text = siwe_text(client, account, **changes)
    signature = account.sign_message(encode_defunct(text=text)).signature.to_0x_hex()
    return client.post("/auth/session", json={"message": text, "signature": signature})


def bearer(client, account) -> dict[str, str]:
    response = sign_in(client, account)
    assert response.status_code == 200, response.text
    assert response.json()["address"] == account.address
    return {"Authorization": f"Bearer {response.json()['token']}"}


def signed_and_sent(client, account, unsigned: dict) -> str:
    raw = account.sign_transaction(unsigned).raw_transaction.to_0x_hex()
    response = client.post("/transactions", json={"raw": raw})
    assert response.status_code == 200, response.text
    deadline = time.monotonic() + 30
    while True:  # mined at once on Anvil, though its receipt may trail the broadcast's answer
        status = client.get(f"/transactions/status/{response.json()['tx_hash']}").json()
        if status["status"] != "pending" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status["status"] == "succeeded", status
    return status


def test_sign_in_checks_domain_chain_time_nonce_and_signer(client, cast):
    user = cast.user
    assert (
        sign_in(client, user, domain="evil.example")
        .json()["detail"]
        .startswith("the message signs in to")
    )
    assert "chain 1" in sign_in(client, user, chain_id=1).json()["detail"]
    assert (
        "expired"
        in sign_in(client, user, expiration_time=datetime.now(UTC) - timedelta(seconds=1)).json()[
            "detail"
        ]
    )
    assert "not issued" in sign_in(client, user, nonce="neverissued1").json()["detail"]

    text = siwe_text(client, user)
    forged = cast.providers[0].sign_message(encode_defunct(text=text)).signature.to_0x_hex()
    response = client.post("/auth/session", json={"message": text, "signature": forged})
    assert response.status_code == 400 and "not by" in response.json()["detail"]
    good = user.sign_message(encode_defunct(text=text)).signature.to_0x_hex()
    assert (
        client.post("/auth/session", json={"message": text, "signature": good}).status_code == 200
    )
    replay = client.post("/auth/session", json={"message": text, "signature": good})
    assert replay.status_code == 400 and "used" in replay.json()["detail"]
    assert (
        client.post("/auth/session", json={"message": "hello", "signature": good}).status_code
        == 400
    )


def test_a_message_relayed_by_a_phishing_site_does_not_sign_in(client, cast):
    """The victim signs in to the phishing site's domain; the site relays the message with its own
    Host header. The gateway checks the domain against its own address, not the header."""
    text = siwe_text(client, cast.user, domain="phish.example")
    signature = cast.user.sign_message(encode_defunct(text=text)).signature.to_0x_hex()
    response = client.post(
        "/auth/session",
        json={"message": text, "signature": signature},
        headers={"Host": "phish.example"},
    )
    assert response.status_code == 400
    assert response.json()["detail"] == "the message signs in to 'phish.example', not 'testserver'"


def test_uploads_need_a_session_and_a_valid_spec(client, cast, settings):
    refused = client.post("/uploads/spec", json={"spec": SPEC})
    assert refused.status_code == 401 and "sign in" in refused.json()["detail"]
    assert (
        client.post(
            "/uploads/spec", json={"spec": SPEC}, headers={"Authorization": "Bearer nope"}
        ).status_code
        == 401
    )
    headers = bearer(client, cast.user)
    bad = client.post(
        "/uploads/spec", json={"spec": SPEC.replace("n_head: 4", "n_head: 5")}, headers=headers
    )
    assert bad.status_code == 400 and "model.n_head" in bad.json()["detail"]
    spec = client.post("/uploads/spec", json={"spec": SPEC}, headers=headers).json()
    assert spec["name"] == "tiny-stdlib-gpt" and spec["nodes"] == 1 and spec["units_per_node"] == 6
    data = client.post("/uploads/dataset", content=b"0123456789" * 1000, headers=headers).json()
    with Storage(settings.ipfs_api) as storage:
        assert storage.cat(spec["cid"]).decode() == SPEC
        assert storage.cat(data["cid"]) == b"0123456789" * 1000 and data["size"] == 10_000


def test_job_escrowed_with_a_permit_then_cancelled_from_signed_transactions(
    client, ledger, cast, story, indexer
):
    user, market = cast.user, ledger.market.functions
    spec_cid = client.post(
        "/uploads/spec", json={"spec": SPEC}, headers=bearer(client, user)
    ).json()["cid"]
    held = ledger.balance(user.address)
    budget = 500 * ZEN
    permit = client.post(
        "/transactions/permit",
        json={"owner": user.address, "spender": "JobMarket", "value": str(budget)},
    ).json()
    signature = user.sign_typed_data(full_message=permit["typed_data"]).signature.to_0x_hex()
    order = {
        "sender": user.address,
        "spec_cid": spec_cid,
        "max_budget": str(budget),
        "max_price": str(10 * ZEN),
        "permit": {"deadline": permit["deadline"], "signature": signature},
    }
    unsigned = client.post("/transactions/jobs", json=order).json()
    assert (unsigned["from"], unsigned["to"], unsigned["chainId"]) == (
        user.address,
        ledger.market.address,
        31337,
    )
    job_id = signed_and_sent(client, user, unsigned)["job_id"]
    assert ledger.job(job_id)["budget"] == budget and ledger.balance(user.address) == held - budget

    index_all(indexer)
    assert client.get(f"/jobs/{job_id}").json()["user"] == user.address
    settle = client.post(f"/transactions/jobs/{job_id}/settle", json={"sender": user.address})
    assert (settle.status_code, settle.json()) == (
        409,
        {"detail": f"Job {job_id} is open, which does not allow this.", "error": "WrongJobStatus"},
    )
    signed_and_sent(
        client,
        user,
        client.post(f"/transactions/jobs/{job_id}/cancel", json={"sender": user.address}).json(),
    )
    assert (
        market.status(job_id).call() == JobStatus.CANCELLED and ledger.balance(user.address) == held
    )
    again = client.post(f"/transactions/jobs/{job_id}/cancel", json={"sender": user.address})
    assert (again.status_code, again.json()["detail"]) == (
        409,
        f"Job {job_id} is cancelled, which does not allow this.",
    )

    too_much = order | {"max_budget": str(10**9 * ZEN), "permit": None}
    assert "holds" in client.post("/transactions/jobs", json=too_much).json()["detail"]
    below = order | {"max_budget": "1"}
    assert "below the reserve" in client.post("/transactions/jobs", json=below).json()["detail"]


def test_bad_signed_transactions_are_refused_with_a_message(client, ledger, cast):
    user = cast.user
    tx = {
        "to": ledger.market.address,
        "data": "0x",
        "value": 0,
        "gas": 100_000,
        "nonce": 0,
        "maxFeePerGas": 10**9,
        "maxPriorityFeePerGas": 1,
    }
    for raw, words in (
        ("0x02deadbeef", "not a signed transaction"),
        (user.sign_transaction(tx | {"chainId": 1}).raw_transaction.to_0x_hex(), "chain 1"),
        (
            user.sign_transaction(
                tx | {"chainId": 31337, "to": cast.providers[0].address}
            ).raw_transaction.to_0x_hex(),
            "not a ledger contract",
        ),
        (
            user.sign_transaction(tx | {"chainId": 31337}).raw_transaction.to_0x_hex(),
            "refused",
        ),  # nonce too low
        (
            devnet_account(99)
            .sign_transaction(tx | {"chainId": 31337})
            .raw_transaction.to_0x_hex(),
            "refused",
        ),
    ):
        response = client.post("/transactions", json={"raw": raw})
        assert response.status_code == 400 and words in response.json()["detail"], (
            words,
            response.text,
        )
    assert client.get("/transactions/status/0x" + "ab" * 32).status_code == 404


def test_the_status_route_replays_only_the_markets_own_transactions(client, ledger, cast):
    """Anyone may ask about any transaction; only one to the market's contracts is replayed for
    its reason. A call that reverts elsewhere (here a contract that always reverts, sent with a
    block's worth of gas) is reported as reverted, and costs the gateway no replay."""
    w3 = ledger.w3
    init = bytes.fromhex("6005600c60003960056000f3" + "60006000fd")  # deploys PUSH 0 PUSH 0 REVERT
    user = cast.user
    deployed = w3.eth.wait_for_transaction_receipt(
        w3.eth.send_transaction({"from": user.address, "data": init})
    )
    sent = w3.eth.send_transaction(
        {"from": user.address, "to": deployed["contractAddress"], "gas": 10_000_000}
    )
    assert w3.eth.wait_for_transaction_receipt(sent)["status"] == 0
    said = client.get(f"/transactions/status/{sent.to_0x_hex()}").json()
    assert (said["status"], said["error"]) == ("reverted", None)


def test_logs_are_written_by_the_jobs_user_and_providers_only(client, cast, story, indexer):
    index_all(indexer)
    job = story.job_id
    provider = next(p for p in cast.providers if p.address == story.winners[0])
    stranger = cast.verifiers[0]
    for account, line in ((cast.user, "queued"), (provider, "unit 0 done")):
        posted = client.post(
            f"/jobs/{job}/logs", json={"lines": [line]}, headers=bearer(client, account)
        )
        assert posted.status_code == 200, posted.text
    refused = client.post(
        f"/jobs/{job}/logs", json={"lines": ["spam"]}, headers=bearer(client, stranger)
    )
    assert refused.status_code == 403
    # A line that would rewrite its readers' terminals is refused whole.
    escapes = client.post(
        f"/jobs/{job}/logs",
        json={"lines": ["fine", "done\x1b[2J\x1b]0;pwned\x07"]},
        headers=bearer(client, provider),
    )
    assert escapes.status_code == 422 and "pattern" in escapes.text
    lines = client.get(f"/jobs/{job}/logs").json()
    assert [(entry["author"], entry["line"]) for entry in lines] == [
        (cast.user.address, "queued"),
        (provider.address, "unit 0 done"),
    ]
    assert [
        entry["line"]
        for entry in client.get(f"/jobs/{job}/logs", params={"since": lines[0]["id"]}).json()
    ] == ["unit 0 done"]


def index_all(indexer) -> None:
    while indexer.step():
        pass


def test_provider_registers_stakes_and_unstakes_from_signed_transactions(client, ledger, cast):
    provider = devnet_account(7)  # a fresh account: the story onboarded 1 to 6
    ledger.transfer(cast.governor, provider.address, 2_000 * ZEN)
    registration = {
        "sender": provider.address,
        "tier": 0,
        "gpu_model": "cpu",
        "gpus": 0,
        "gpu_memory_gb": 0,
        "network_gbps": 1,
        "endpoint": "tcp://127.0.0.1:29500",
        "attestation": "0x" + "ab" * 32,
    }
    assert (
        client.post(
            "/transactions/providers", json=registration | {"attestation": "0xab"}
        ).status_code
        == 422
    )
    unknown = client.post("/transactions/providers", json=registration | {"tier": 9})
    assert (unknown.status_code, unknown.json()) == (
        409,
        {"detail": "There is no tier 9.", "error": "UnknownTier"},
    )
    signed_and_sent(
        client, provider, client.post("/transactions/providers", json=registration).json()
    )
    again = client.post("/transactions/providers", json=registration)
    assert (again.status_code, again.json()["error"]) == (409, "AlreadyRegistered")
    assert again.json()["detail"] == f"Account {provider.address} is already registered."

    stake = 1_500 * ZEN
    permit = client.post(
        "/transactions/permit",
        json={"owner": provider.address, "spender": "Staking", "value": str(stake)},
    ).json()
    signature = provider.sign_typed_data(full_message=permit["typed_data"]).signature.to_0x_hex()
    body = {
        "sender": provider.address,
        "amount": str(stake),
        "permit": {"deadline": permit["deadline"], "signature": signature},
    }
    unsigned = client.post("/transactions/stake", json=body).json()
    assert (unsigned["from"], unsigned["to"]) == (provider.address, ledger.staking.address)
    signed_and_sent(client, provider, unsigned)
    assert client.post("/transactions/stake", json=body | {"amount": "0"}).status_code == 422
    too_much = client.post("/transactions/stake", json=body | {"amount": str(10**6 * ZEN)})
    assert too_much.status_code == 400 and "the stake needs 1,000,000" in too_much.json()["detail"]

    unstake = {"sender": provider.address, "amount": str(2_000 * ZEN)}
    refused = client.post("/transactions/unstake", json=unstake)
    assert (refused.status_code, refused.json()["error"]) == (409, "InsufficientFreeStake")
    assert refused.json()["detail"] == (
        "Only 1,500 ZEN of your stake is free (the rest is locked as collateral for "
        "running jobs); you asked for 2,000 ZEN."
    )
    signed_and_sent(
        client,
        provider,
        client.post("/transactions/unstake", json=unstake | {"amount": str(500 * ZEN)}).json(),
    )
    early = client.post("/transactions/stake/withdraw", json={"sender": provider.address})
    assert (early.status_code, early.json()["error"]) == (409, "UnbondingNotOver")
    assert early.json()["detail"].startswith("Your unbonding stake can be withdrawn from ")

    shown = client.get(f"/chain/accounts/{provider.address.lower()}").json()
    assert (shown["role"], shown["tier"], shown["admitted"]) == ("provider", 0, False)
    assert [int(shown[k]) for k in ("zen", "staked", "locked", "unbonding", "owed")] == [
        500 * ZEN,
        1_000 * ZEN,
        0,
        500 * ZEN,
        0,
    ]
    assert int(shown["eth"]) > 0 and shown["unbonding_ends"] > 0
    assert client.get("/chain/accounts/0x1234").status_code == 422


def test_verifier_registers_with_an_endpoint(client, ledger):
    verifier = devnet_account(8)
    assert (
        client.post(
            "/transactions/verifiers", json={"sender": verifier.address, "endpoint": ""}
        ).status_code
        == 422
    )
    signed_and_sent(
        client,
        verifier,
        client.post(
            "/transactions/verifiers",
            json={"sender": verifier.address, "endpoint": "https://verifier.example"},
        ).json(),
    )
    assert client.get(f"/chain/accounts/{verifier.address}").json()["role"] == "verifier"


def test_a_client_that_spends_its_write_budget_is_refused_until_the_window_moves(settings):
    """Anonymous sign-in nonces cost the gateway work: one address asking in a loop gets 429 with
    Retry-After, and its reads go on."""
    client = TestClient(create_app(settings.model_copy(update={"gateway_write_limit": "3/minute"})))
    assert [client.get("/auth/nonce").status_code for _ in range(3)] == [200, 200, 200]
    refused = client.get("/auth/nonce")
    assert refused.status_code == 429
    assert refused.json()["detail"].startswith("rate limit: at most 3 per 1 minute writes")
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert client.post("/uploads/spec", json={"spec": SPEC}).status_code == 429
    assert client.get("/health").status_code == 200


def test_anonymous_nonces_write_nothing_and_a_forged_one_is_refused(client, cast, settings):
    for _ in range(20):
        client.get("/auth/nonce")
    with open_database(settings.database_url)() as session:
        assert session.scalar(select(func.count()).select_from(db.SignInNonce)) == 0
    nonce = client.get("/auth/nonce").json()["nonce"]
    later = f"{int(nonce[16:26], 16) + 3600:010x}"
    forged = nonce[:16] + later + nonce[26:]  # a longer life, the gateway's own MAC
    response = sign_in(client, cast.user, nonce=forged)
    assert response.status_code == 400 and "not issued" in response.json()["detail"]
    assert sign_in(client, cast.user).status_code == 200
    with open_database(settings.database_url)() as session:
        assert session.scalar(select(func.count()).select_from(db.SignInNonce)) == 1


def test_uploads_are_bounded_by_the_body_limit_and_the_wallets_daily_quota(settings, cast):
    client = TestClient(create_app(settings.model_copy(update={"gateway_upload_quota": 25_000})))
    headers = bearer(client, cast.user)
    huge_spec = client.post(
        "/uploads/spec", content=b"x" * (3 << 20), headers=headers | {"Content-Type": "text/plain"}
    )
    assert huge_spec.status_code == 413

    def chunks(size: int):  # no Content-Length: the body arrives as it is read
        yield from (b"z" * 1000 for _ in range(size // 1000))

    streamed = client.post("/uploads/spec", content=chunks(3 << 20), headers=headers)
    assert streamed.status_code == 413
    first = client.post("/uploads/dataset", content=b"a" * 20_000, headers=headers)
    assert first.status_code == 200
    over = client.post("/uploads/dataset", content=chunks(10_000), headers=headers)
    assert over.status_code == 400
    assert "5000 bytes of its daily upload quota" in over.json()["detail"]
    last = client.post("/uploads/dataset", content=b"b" * 5_000, headers=headers)
    assert last.status_code == 200
