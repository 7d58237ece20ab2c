"""Becoming a provider: register with a pinned benchmark report as attestation, stake by permit."""

from __future__ import annotations

import logging

from eth_account.signers.local import LocalAccount
from web3.types import TxReceipt

from marketplace.chain.ledger import Hardware, Ledger
from marketplace.ipfs import multihash
from marketplace.ipfs.cid import CID
from marketplace.storage import Storage
from node.benchmark import BenchmarkReport, run_benchmark

from .chainview import chain_time

log = logging.getLogger(__name__)

PERMIT_TTL = 3_600  # seconds a stake permit stays valid


def attestation_of(cid: str) -> bytes:
    """The 32-byte sha2-256 digest inside a CIDv0: what `Hardware.attestation` carries, from
    which a verifier rebuilds the CID of the benchmark report to fetch and check."""
    parsed = CID.parse(cid)
    code, digest = multihash.split(parsed.multihash)
    if parsed.version != 0 or code != multihash.SHA2_256:
        raise ValueError(f"{cid} is not a CIDv0 (sha2-256, dag-pb)")
    return digest


def publish_benchmark(storage: Storage, replicas: int, device: str | None = None) -> tuple[BenchmarkReport, str]:
    """Run the admission benchmark and pin its report on `replicas` IPFS nodes."""
    report = run_benchmark(device)
    cid = storage.add_bytes(report.to_bytes())
    storage.pin(cid, replicas=replicas)
    log.info("benchmark %.1f GFLOP/s pinned as %s", report.gflops, cid)
    return report, cid


def register(ledger: Ledger, account: LocalAccount, tier: int, hardware: Hardware, report_cid: str) -> TxReceipt:
    declared = Hardware(hardware.gpu_model, hardware.gpus, hardware.gpu_memory_gb,
                        hardware.network_gbps, hardware.endpoint, attestation_of(report_cid))
    return ledger.register_provider(account, tier, declared)


def stake_with_permit(ledger: Ledger, account: LocalAccount, amount: int) -> TxReceipt:
    """Stake in one transaction: an ERC-2612 permit for the staking contract, signed here."""
    zen = ledger.zen.functions
    deadline = chain_time(ledger.w3) + PERMIT_TTL
    message = {
        "types": {
            "EIP712Domain": [{"name": "name", "type": "string"}, {"name": "version", "type": "string"},
                             {"name": "chainId", "type": "uint256"},
                             {"name": "verifyingContract", "type": "address"}],
            "Permit": [{"name": "owner", "type": "address"}, {"name": "spender", "type": "address"},
                       {"name": "value", "type": "uint256"}, {"name": "nonce", "type": "uint256"},
                       {"name": "deadline", "type": "uint256"}],
        },
        "primaryType": "Permit",
        "domain": {"name": zen.name().call(), "version": "1", "chainId": ledger.w3.eth.chain_id,
                   "verifyingContract": ledger.zen.address},
        "message": {"owner": account.address, "spender": ledger.staking.address, "value": amount,
                    "nonce": zen.nonces(account.address).call(), "deadline": deadline},
    }
    signed = account.sign_typed_data(full_message=message)
    fn = ledger.staking.functions.stakeWithPermit(
        amount, deadline, signed.v, signed.r.to_bytes(32, "big"), signed.s.to_bytes(32, "big"))
    return ledger.send(fn, account)
