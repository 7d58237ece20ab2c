"""Benchmark admission: fetch the report a registering provider pinned and check it.

Anyone may register with any attestation, so the report is read within a byte bound and
validated by its schema before its checksum is recomputed; the daemon attests what passes."""

from __future__ import annotations

from marketplace.ipfs.cid import CID, DAG_PB
from marketplace.storage import ContentTooLarge, Storage
from node.benchmark import MAX_REPORT_BYTES, BenchmarkRejected, BenchmarkReport, check_report

SHA2_256 = b"\x12\x20"  # multihash prefix: sha2-256, 32 bytes


def report_cid(attestation: bytes) -> str:
    """The CIDv0 a provider's `Hardware.attestation` names: it is that CID's sha2-256 digest."""
    return str(CID(0, DAG_PB, SHA2_256 + bytes(attestation)))


def review(storage: Storage, attestation: bytes) -> BenchmarkReport:
    """The report `attestation` names, if it checks out. Raises BenchmarkRejected for a report
    that does not, StorageError when it cannot be read (NodeUnavailable: our node is down)."""
    try:
        report = BenchmarkReport.from_bytes(
            storage.cat(report_cid(attestation), max_bytes=MAX_REPORT_BYTES)
        )
    except ContentTooLarge as exc:
        raise BenchmarkRejected(f"not a benchmark report: {exc}") from None
    check_report(report)
    return report
