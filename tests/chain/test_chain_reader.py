"""One chain reader: only marketplace/chain touches contract functions and events (and the devnet's
scripted job, which plays every part of a job for tests and benchmarks), and structs are read by
their ABI field names, so a field added to a contract struct shifts nothing a role reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from marketplace.chain.ledger import Hardware, JobRequest
from marketplace.chain.zen import ZEN
from marketplace.devnet.scripted_job import cid_of_bytes
from marketplace.protocol.terms import Tier

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("marketplace", "node", "verifier")
CHAIN = ROOT / "marketplace" / "chain"
SCRIPTED_JOB = ROOT / "marketplace" / "devnet" / "scripted_job.py"
CONTRACT_ACCESS = re.compile(r"\.functions\b|\.events\s*[.\[]|\bdecode_function_input\b")


def _fields(contract, fn_name: str) -> list[str]:
    (output,) = next(
        i["outputs"] for i in contract.abi if i["type"] == "function" and i["name"] == fn_name
    )
    return [c["name"] for c in output["components"]]


def test_only_the_chain_client_touches_contract_functions_and_events():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if CHAIN not in path.parents and path != SCRIPTED_JOB
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if CONTRACT_ACCESS.search(line)
    ]
    assert not found, "call the Ledger (marketplace/chain) instead:\n" + "\n".join(found)


@pytest.mark.anvil
def test_structs_are_read_by_abi_field_name(ledger, cast):
    provider = cast.providers[0]
    ledger.transfer(cast.governor, cast.user.address, 10_000 * ZEN)
    ledger.register_provider(
        provider, Tier.COMMUNITY, Hardware("cpu", 0, 0, 1, "http://127.0.0.1:7000")
    )
    request = JobRequest(
        spec_cid=cid_of_bytes(b"spec"),
        tier=Tier.COMMUNITY,
        nodes=1,
        units_per_node=2,
        checkpoint_interval=3_600,
        sample_rate_bps=5_000,
        max_price=100 * ZEN,
        budget=5_000 * ZEN,
    )
    job_id = ledger.create_job(cast.user, request)

    job = ledger.job(job_id)
    assert list(job) == [*_fields(ledger.market, "job"), "specCid"]
    assert (job["unitsPerNode"], job["specCid"]) == (2, request.spec_cid)
    assert list(ledger.slot(job_id, 0)) == _fields(ledger.market, "slot")
    assert list(ledger.participant(job_id, provider.address)) == _fields(
        ledger.market, "participant"
    )
    account = ledger.staking_account(provider.address)
    assert list(account) == _fields(ledger.staking, "account")
    assert account["tier"] == Tier.COMMUNITY and account["admitted"] is False
    assert ledger.hardware(provider.address)["endpoint"] == "http://127.0.0.1:7000"
    assert [t["name"] for t in ledger.tiers()][Tier.COMMUNITY] == ledger.struct(
        ledger.staking, "tier", Tier.COMMUNITY
    )["name"]
    assert list(ledger.verification_result(job_id, 0, 0)) == _fields(ledger.verification, "result")
