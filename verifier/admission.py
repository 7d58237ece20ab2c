"""Benchmark admission: fetch the report a registering provider pinned, check it, attest it."""

from __future__ import annotations

import logging

from eth_account.signers.local import LocalAccount

from marketplace.chain.ledger import Ledger
from marketplace.ipfs.cid import CID, DAG_PB
from marketplace.storage import NodeUnavailable, Storage, StorageError
from node.benchmark import BenchmarkRejected, BenchmarkReport, check_report

log = logging.getLogger(__name__)

SHA2_256 = b"\x12\x20"  # multihash prefix: sha2-256, 32 bytes


def report_cid(attestation: bytes) -> str:
    """The CIDv0 a provider's `Hardware.attestation` names: it is that CID's sha2-256 digest."""
    return str(CID(0, DAG_PB, SHA2_256 + bytes(attestation)))


def admit(
    ledger: Ledger, verifier: LocalAccount, storage: Storage, provider: str, attestation: bytes
) -> bool:
    """Attest `provider`'s benchmark if its report checks out; True if it is admitted now.

    A report that cannot be fetched or fails the check is logged and not attested: admission
    is the only gate in front of a provider's first bid, so nothing doubtful passes it.
    """
    if ledger.staking_account(provider)["admitted"]:
        return True
    cid = report_cid(attestation)
    try:
        report = BenchmarkReport.from_bytes(storage.cat(cid))
        check_report(report)
    except NodeUnavailable:
        raise  # our own node is down: the caller retries the event, the provider is not at fault
    except (StorageError, BenchmarkRejected) as exc:
        log.warning("provider %s not admitted: benchmark report %s: %s", provider, cid, exc)
        return False
    ledger.attest_benchmark(verifier, provider, bytes(attestation), int(report.gflops))
    log.info(
        "provider %s admitted: %s GFLOP/s on %s (report %s)",
        provider,
        report.gflops,
        report.device,
        cid,
    )
    return True
