"""The registry's events indexed from a real Anvil and read back through the HTTP API: names,
owners after a transfer, versions and their lineage; bad paths are 4xx."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
import uvicorn
from playwright.sync_api import expect, sync_playwright

from marketplace.chain.registry import Reference, Registry
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import escrow_job
from marketplace.gateway.api.main import create_app
from marketplace.processes import free_port
from marketplace.protocol.terms import Kind
from marketplace.sdk import AsyncClient, GatewayError

pytestmark = pytest.mark.anvil
CID = "QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN"
CID2 = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"


@pytest.fixture
def reverted(ledger):
    """The chain put back as it was after the test."""
    snapshot = ledger.w3.provider.make_request("evm_snapshot", [])["result"]
    yield
    ledger.w3.provider.make_request("evm_revert", [snapshot])


@pytest.fixture
def published(ledger, reverted):
    """Two models (one a fine-tune of the other, made by a job alice paid for, then handed to a
    second owner) and a dataset; alice, bob and the job."""
    registry = Registry(ledger.w3, ledger.deployment)
    alice, bob = devnet_account(1), devnet_account(2)
    job_id = escrow_job(ledger, devnet_account(0), alice)
    registry.publish(alice, Kind.MODEL, "acme/base", CID, "Apache-2.0")
    registry.publish(alice, Kind.MODEL, "acme/base", CID2, "Apache-2.0", metadata_cid=CID)
    registry.publish(
        alice, Kind.MODEL, "acme/chat", CID, "MIT", parent=Reference("acme/base", 2), job_id=job_id
    )
    registry.transfer(alice, Kind.MODEL, "acme/chat", bob.address)
    registry.publish(bob, Kind.DATASET, "bob/corpus", CID2, "CC0-1.0")
    return alice, bob, job_id


def test_names_versions_owners_and_lineage_read_back(published, indexer, client):
    alice, bob, job_id = published
    while indexer.step():
        pass

    models = client.get("/registry/models").json()
    assert [(m["name"], m["owner"], m["versions"]) for m in models] == [
        ("acme/base", alice.address, 2),
        ("acme/chat", bob.address, 1),
    ]
    assert models[0]["latest"]["cid"] == CID2 and models[0]["latest"]["metadata_cid"] == CID

    chat = client.get("/registry/models/acme/chat").json()
    [version] = chat["history"]
    assert (version["parent"], version["job_id"], version["license"]) == (
        "acme/base@2",
        job_id,
        "MIT",
    )
    assert version["publisher"] == alice.address and chat["owner"] == bob.address
    assert version["tx_hash"].startswith("0x") and version["block_number"] > 0
    shown = client.get(f"/chain/tx/{version['tx_hash']}").json()  # the explorer's transaction view
    assert (shown["contract"], shown["method"]) == ("Registry", "publish")
    assert [log["event"] for log in shown["logs"]] == ["NameRegistered", "VersionPublished"]

    [corpus] = client.get("/registry/datasets").json()
    assert (corpus["kind"], corpus["name"], corpus["owner"]) == (
        "dataset",
        "bob/corpus",
        bob.address,
    )
    assert client.get("/registry/models?limit=1&offset=1").json() == models[1:]


def test_unknown_names_and_bad_paths_are_4xx(published, indexer, client):
    while indexer.step():
        pass
    missing = client.get("/registry/models/acme/none")
    assert missing.status_code == 404 and "has no published version" in missing.json()["detail"]
    assert client.get("/registry/datasets/acme/base").status_code == 404  # a model, not a dataset
    for path in (
        "/registry/weights",
        "/registry/models/Acme/base",
        "/registry/models/acme/" + "x" * 200,
    ):
        assert client.get(path).status_code == 422, path
    assert client.get("/registry/models/acme/base/extra").status_code == 404


@pytest.mark.usefixtures("reverted")
def test_the_sdk_pushes_through_the_gateway_signing_here_and_pulls_back(
    ledger, settings, indexer, tmp_path
):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "part-0.jsonl").write_text('{"text": "hello"}\n')
    app = create_app(settings)

    def client(who: int) -> AsyncClient:
        return AsyncClient(
            "http://gateway",
            wallet=devnet_account(who),
            ipfs_api=settings.ipfs_api,
            ipfs_replicas=[],
            transport=httpx.ASGITransport(app=app),
            deployment=ledger.deployment,
        )

    job_id = escrow_job(ledger, devnet_account(0), devnet_account(3))  # carol's

    async def journey():
        async with client(3) as carol, client(4) as dave:
            pushed = await carol.push(
                "dataset", corpus, name="carol/corpus", license="cc-by-4.0", job_id=job_id
            )
            assert pushed["license"] == "CC-BY-4.0"
            assert pushed["transaction"]["status"] == "succeeded"
            while indexer.step():
                pass
            version = await dave.pull("dataset", "carol/corpus", tmp_path / "back")
            assert (version["version"], version["job_id"], version["cid"]) == (
                1,
                job_id,
                pushed["cid"],
            )
            assert (tmp_path / "back" / "part-0.jsonl").read_text() == '{"text": "hello"}\n'
            [listed] = await dave.registry("dataset")
            assert listed["owner"] == devnet_account(3).address
            with pytest.raises(GatewayError, match="belongs to") as refused:
                await dave.push("dataset", corpus, name="carol/corpus", license="MIT")
            assert refused.value.status == 409
            with pytest.raises(GatewayError, match="has no version 2"):
                await dave.resolve("dataset", "carol/corpus@2")

    asyncio.run(journey())


def test_the_explorer_shows_the_registry(published, indexer, settings):
    """The explorer page in Chromium, served by the gateway: one row per name."""
    while indexer.step():
        pass
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run)
    thread.start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--headless", "--no-sandbox", "--disable-gpu"],
            )
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{port}/ui/explorer/")
                rows = page.locator("#registry tbody tr[data-name]")
                expect(rows).to_have_count(3, timeout=20_000)
                chat = page.locator('#registry tr[data-name="model:acme/chat"]')
                assert "acme/base@2" in chat.inner_text() and "MIT" in chat.inner_text()
            finally:
                browser.close()
    finally:
        server.should_exit = True
        thread.join(10)
