"""Becoming a provider: register with a pinned benchmark report as attestation, stake by permit."""

from __future__ import annotations

import logging

from eth_account.signers.local import LocalAccount
from web3.types import TxReceipt

from marketplace.chain.ledger import Hardware, Ledger
from marketplace.chain.permit import sign_permit
from marketplace.ipfs import multihash
from marketplace.ipfs.cid import CID
from marketplace.storage import Storage
from node.benchmark import BenchmarkReport, run_benchmark

log = logging.getLogger(__name__)


def attestation_of(cid: str) -> bytes:
    """The 32-byte sha2-256 digest inside a CIDv0: what `Hardware.attestation` carries, from
    which a verifier rebuilds the CID of the benchmark report to fetch and check."""
    parsed = CID.parse(cid)
    code, digest = multihash.split(parsed.multihash)
    if parsed.version != 0 or code != multihash.SHA2_256:
        raise ValueError(f"{cid} is not a CIDv0 (sha2-256, dag-pb)")
    return digest


def publish_benchmark(
    storage: Storage, replicas: int, device: str | None = None
) -> tuple[BenchmarkReport, str]:
    """Run the admission benchmark and pin its report on `replicas` IPFS nodes."""
    report = run_benchmark(device)
    cid = storage.add_bytes(report.to_bytes())
    storage.pin(cid, replicas=replicas)
    log.info("benchmark %.1f GFLOP/s pinned as %s", report.gflops, cid)
    return report, cid


def register(
    ledger: Ledger, account: LocalAccount, tier: int, hardware: Hardware, report_cid: str
) -> TxReceipt:
    declared = Hardware(
        hardware.gpu_model,
        hardware.gpus,
        hardware.gpu_memory_gb,
        hardware.network_gbps,
        hardware.endpoint,
        attestation_of(report_cid),
    )
    return ledger.register_provider(account, tier, declared)


def stake_with_permit(ledger: Ledger, account: LocalAccount, amount: int) -> TxReceipt:
    """Stake in one transaction: an ERC-2612 permit for the staking contract, signed here."""
    deadline, v, r, s = sign_permit(ledger, account, ledger.staking.address, amount)
    return ledger.send(ledger.stake_call(amount, (deadline, v, r, s)), account)
