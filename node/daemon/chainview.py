"""The few chain reads the daemon and its CLI share: chain time, revert names, a staking account."""

from __future__ import annotations

from web3 import Web3

from marketplace.chain.errors import ChainError, ContractRevert
from marketplace.chain.ledger import Ledger
from marketplace.chain.tx import call


def chain_time(w3: Web3) -> int:
    """The latest block's timestamp: the clock every deadline in the market is checked against."""
    return w3.eth.get_block("latest")["timestamp"]


def revert_name(exc: ChainError) -> str | None:
    """The custom error a contract refused with, or None for any other chain failure."""
    return exc.name if isinstance(exc, ContractRevert) else None


def struct(contract, fn_name: str, *args) -> dict:
    """A view returning one struct, by field name from the ABI, so a field added or moved in the
    contract does not shift the ones read here."""
    fn = next(i for i in contract.abi if i.get("name") == fn_name and i["type"] == "function")
    names = [c["name"] for c in fn["outputs"][0]["components"]]
    return dict(zip(names, call(getattr(contract.functions, fn_name)(*args))))


def staking_account(ledger: Ledger, address: str) -> dict:
    return struct(ledger.staking, "account", address)


def spec_cid(ledger: Ledger, job_id: int) -> str:
    """The job's spec CID, which the market records only in its JobCreated event."""
    events = ledger.market.events.JobCreated().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id})
    if not events:
        raise ChainError(f"no JobCreated event for job {job_id}")
    return events[0]["args"]["specCid"]
