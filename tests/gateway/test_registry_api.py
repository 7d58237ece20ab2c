"""The registry's events indexed from a real Anvil and read back through the HTTP API: names,
owners after a transfer, versions and their lineage; bad paths are 4xx."""

from __future__ import annotations

import pytest

from marketplace.chain.registry import Kind, Reference, Registry
from marketplace.devnet.accounts import devnet_account

pytestmark = pytest.mark.anvil
CID = "QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN"
CID2 = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"


@pytest.fixture
def published(ledger):
    """Two models (one a fine-tune of the other, made by job 5, then handed to a second owner)
    and a dataset; the chain is put back as it was after the test."""
    w3 = ledger.w3
    snapshot = w3.provider.make_request("evm_snapshot", [])["result"]
    registry = Registry(w3, ledger.deployment)
    alice, bob = devnet_account(1), devnet_account(2)
    registry.publish(alice, Kind.MODEL, "acme/base", CID, "Apache-2.0")
    registry.publish(alice, Kind.MODEL, "acme/base", CID2, "Apache-2.0", metadata_cid=CID)
    registry.publish(
        alice, Kind.MODEL, "acme/chat", CID, "MIT", parent=Reference("acme/base", 2), job_id=5
    )
    registry.transfer(alice, Kind.MODEL, "acme/chat", bob.address)
    registry.publish(bob, Kind.DATASET, "bob/corpus", CID2, "CC0-1.0")
    yield alice, bob
    w3.provider.make_request("evm_revert", [snapshot])


def test_names_versions_owners_and_lineage_read_back(published, indexer, client):
    alice, bob = published
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
    assert (version["parent"], version["job_id"], version["license"]) == ("acme/base@2", 5, "MIT")
    assert version["publisher"] == alice.address and chat["owner"] == bob.address
    assert version["tx_hash"].startswith("0x") and version["block_number"] > 0

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
