"""The registry client on a real Anvil: names, numbered versions, lineage, owners, and each refusal
as a readable error before or instead of a transaction."""

from __future__ import annotations

import pytest

from marketplace.chain.deploy import Deployment
from marketplace.chain.errors import ChainError, ContractRevert
from marketplace.chain.registry import (
    BadReference,
    NotNameOwner,
    Reference,
    Registry,
)
from marketplace.devnet.accounts import devnet_account
from marketplace.licenses import NotAnSpdxId, spdx_id
from marketplace.protocol.terms import Kind

CID = "QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN"
CID2 = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"
ALICE, BOB = devnet_account(1), devnet_account(2)


def test_versions_are_numbered_from_one_and_carry_lineage(registry, job_id):
    first = registry.publish(ALICE, Kind.MODEL, "acme/tiny", CID, "apache-2.0")
    assert (first.number, first.license, first.publisher) == (1, "Apache-2.0", ALICE.address)
    assert first.parent is None and first.job_id is None and first.metadata_cid is None

    second = registry.publish(
        ALICE,
        Kind.MODEL,
        "acme/tiny",
        CID2,
        "MIT",
        metadata_cid=CID,
        parent=Reference("acme/tiny"),  # the newest: version 1
        job_id=job_id,
    )
    assert second.number == 2
    assert second.parent == Reference("acme/tiny", 1)
    assert (second.job_id, second.metadata_cid) == (job_id, CID)
    assert registry.resolve(Kind.MODEL, "acme/tiny") == second
    assert registry.resolve(Kind.MODEL, "acme/tiny@1") == first
    assert registry.versions(Kind.MODEL, "acme/tiny") == [first, second]
    assert registry.names(Kind.MODEL) == ["acme/tiny"]
    assert registry.names(Kind.DATASET) == []
    assert registry.owner_of(Kind.MODEL, "acme/tiny") == ALICE.address


def test_only_the_owner_publishes_until_it_hands_the_name_on(registry):
    registry.publish(ALICE, Kind.DATASET, "acme/corpus", CID, "CC-BY-4.0")
    with pytest.raises(NotNameOwner, match=f"belongs to {ALICE.address}, not to {BOB.address}"):
        registry.check_publisher(Kind.DATASET, "acme/corpus", BOB.address)
    # The contract refuses it too, at the gas estimate: nothing is mined.
    nonce = registry.w3.eth.get_transaction_count(BOB.address)
    with pytest.raises(ContractRevert) as refused:
        registry.publish(BOB, Kind.DATASET, "acme/corpus", CID2, "MIT")
    assert refused.value.name == "NotNameOwner"
    assert str(refused.value) == (
        f"acme/corpus belongs to {ALICE.address}, not to {BOB.address}: only its owner publishes "
        "its versions or hands it on."
    )
    assert registry.w3.eth.get_transaction_count(BOB.address) == nonce

    registry.transfer(ALICE, Kind.DATASET, "acme/corpus", BOB.address)
    assert registry.publish(BOB, Kind.DATASET, "acme/corpus", CID2, "MIT").number == 2
    # The same name as a model is another namespace, still free.
    assert registry.owner_of(Kind.MODEL, "acme/corpus") is None


def test_a_version_cannot_claim_a_job_its_publisher_did_not_pay_for(registry, job_id):
    """Lineage on-chain: bob's model cannot say alice's job made it, nor name a job that is not."""
    with pytest.raises(ContractRevert) as refused:
        registry.publish(BOB, Kind.MODEL, "bob/stolen", CID, "MIT", job_id=job_id)
    assert str(refused.value) == (
        f"Job {job_id} was paid for by {ALICE.address}, not by {BOB.address}: a version can only "
        "name a job its publisher paid for."
    )
    with pytest.raises(ContractRevert, match=f"There is no job {job_id + 1}"):
        registry.publish(ALICE, Kind.MODEL, "acme/tiny", CID, "MIT", job_id=job_id + 1)
    assert registry.owner_of(Kind.MODEL, "bob/stolen") is None


def test_a_license_that_is_not_an_spdx_id_is_refused_before_any_transaction(registry):
    nonce = registry.w3.eth.get_transaction_count(ALICE.address)
    for bad in ("Apache 2", "llama3", "MIT OR Apache-2.0", ""):
        with pytest.raises(NotAnSpdxId, match="is not an SPDX license id"):
            registry.publish(ALICE, Kind.MODEL, "acme/tiny", CID, bad)
    with pytest.raises(NotAnSpdxId, match="deprecated"):
        spdx_id("GPL-3.0")  # now GPL-3.0-only or GPL-3.0-or-later
    assert registry.w3.eth.get_transaction_count(ALICE.address) == nonce


def test_a_license_outside_the_spdx_list_is_a_license_ref():
    assert spdx_id("LicenseRef-llama3.1") == "LicenseRef-llama3.1"
    assert spdx_id(" licenseref-OpenRAIL-M ") == "LicenseRef-OpenRAIL-M"
    for bad in ("LicenseRef-", "LicenseRef-a b", "LicenseRef-x+y", "LicenseRef-" + "a" * 54):
        with pytest.raises(NotAnSpdxId, match="a license outside the list is LicenseRef-<id>"):
            spdx_id(bad)


@pytest.mark.parametrize(
    "text",
    ["tiny", "Acme/tiny", "acme/tiny/v2", "acme/", "acme/tiny@0", "acme/tiny@x", "acme/ti ny"],
)
def test_a_reference_that_is_not_org_name_at_n_is_refused(text):
    with pytest.raises(BadReference):
        Reference.parse(text)


def test_missing_names_and_versions_read_as_sentences(registry):
    with pytest.raises(ContractRevert, match=r"^acme/none has no published version\.$"):
        registry.resolve(Kind.MODEL, "acme/none")
    registry.publish(ALICE, Kind.MODEL, "acme/tiny", CID, "MIT")
    with pytest.raises(ContractRevert, match=r"^acme/tiny has no version 2\.$"):
        registry.resolve(Kind.MODEL, "acme/tiny@2")
    with pytest.raises(ContractRevert, match="acme/base has no version 1"):
        registry.publish(
            ALICE, Kind.MODEL, "acme/tiny", CID, "MIT", parent=Reference("acme/base", 1)
        )


def test_a_deployment_from_before_the_registry_says_so(w3, deployment):
    old = Deployment(
        chain_id=deployment.chain_id,
        deploy_block=deployment.deploy_block,
        addresses={k: v for k, v in deployment.addresses.items() if k != "Registry"},
        abis=deployment.abis,
    )
    with pytest.raises(ChainError, match="has no registry contract"):
        Registry(w3, old)
