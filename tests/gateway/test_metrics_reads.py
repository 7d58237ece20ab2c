"""The metrics route reads checkpoints whose CIDs providers committed, which may name anyone's
bytes. A request reads at most FETCHES_PER_REQUEST checkpoints it has not read before, each at
most MAX_CHECKPOINT_BYTES (refused by the size its root declares, before the rest is read); what
it read is remembered, and what it could not read is passed over for a while, so junk neither
costs every request its reads nor keeps the readable checkpoints from being read. A checkpoint
that is no checkpoint shows no figures, never a 500.

The gateway's storage is the real client of a real IPFS node, counting what it is asked."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from gateway_support import UNLIMITED
from sqlalchemy.orm import sessionmaker
from storage.support import dag_bomb, put_blocks

from marketplace.config import Settings
from marketplace.gateway import db
from marketplace.gateway.api.deps import get_storage
from marketplace.gateway.api.main import create_app
from marketplace.gateway.api.service import FETCHES_PER_REQUEST, METRIC_FIELDS
from marketplace.gateway.checkpoints import MAX_CHECKPOINT_BYTES
from marketplace.ipfs.importer import only_hash
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.tagged import dump_tagged
from marketplace.protocol.units import CHECKPOINTS
from marketplace.storage import ContentTooLarge, Storage

JOB = 7
USER = "0x" + "11" * 20
PROVIDER = "0x" + "22" * 20


class CountingStorage(Storage):
    """The gateway's client of the node, noting each checkpoint read, its outcome, and each
    block fetched."""

    def __init__(self, reads: list, *args) -> None:
        super().__init__(*args)
        self.reads = reads

    def cat(self, cid: str, max_bytes: int | None = None) -> bytes:
        try:
            data = super().cat(cid, max_bytes)
        except Exception as exc:
            self.reads.append((cid, type(exc)))
            raise
        self.reads.append((cid, None))
        return data

    def get_block(self, cid):
        self.reads.append(("block", str(cid)))
        return super().get_block(cid)


@dataclass
class Gateway:
    client: TestClient
    sessions: sessionmaker
    reads: list  # (cid, its read's error or None) per checkpoint read, ("block", cid) per block
    storage: Storage  # for the test's own adds

    def checkpoint_reads(self) -> list[tuple[str, type | None]]:
        reads = [r for r in self.reads if r[0] != "block"]
        self.reads.clear()
        return reads

    def metrics(self) -> dict:
        response = self.client.get(f"/jobs/{JOB}/metrics")
        assert response.status_code == 200, response.text
        return response.json()

    def commit(self, cids: list[str]) -> None:
        """A running job of one slot whose units name `cids`, as the indexer would hold it."""
        where = {"block_number": 1, "tx_hash": "0x" + "00" * 32}
        with self.sessions() as session:
            session.add(
                db.Job(
                    job_id=JOB,
                    user=USER,
                    tier=0,
                    spec_cid="spec",
                    nodes=1,
                    units_per_node=len(cids),
                    unit_gpu_seconds=60,
                    max_price=1,
                    budget=10**21,
                    collateral=0,
                    log_index=0,
                    **where,
                )
            )
            session.add(db.JobStatusChange(job_id=JOB, status="running", log_index=1, **where))
            for i, cid in enumerate(cids):
                session.add(
                    db.Unit(
                        job_id=JOB,
                        slot=0,
                        index=i,
                        provider=PROVIDER,
                        cid=cid,
                        state_hash="0x" + "ab" * 32,
                        gpu_seconds=60,
                        amount=1,
                        remaining_before=10**21,
                        log_index=2 + i,
                        **where,
                    )
                )
            session.commit()


@pytest.fixture
def gateway(ipfs_api, tmp_path):
    settings = Settings(
        home=tmp_path,
        ipfs_api=ipfs_api,
        ipfs_replicas=[],
        database_url=f"sqlite:///{tmp_path / 'gateway.sqlite3'}",
        gateway_read_limit=UNLIMITED,
        gateway_write_limit=UNLIMITED,
    )
    app = create_app(settings)
    reads: list = []

    def counted():
        with CountingStorage(reads, settings.ipfs_api, []) as storage:
            yield storage

    app.dependency_overrides[get_storage] = counted
    with Storage(settings.ipfs_api, []) as storage:
        yield Gateway(TestClient(app), app.state.sessions, reads, storage)


def checkpoint(step: int, loss: float) -> bytes:
    metrics = {"loss": loss, "end_step": step}
    return Checkpoint({"progress": {"step": step}}, {"metrics": metrics}).to_bytes()


def losses(metrics: dict) -> list[float | None]:
    return [unit["loss"] for unit in metrics["units"]]


def test_a_request_reads_at_most_the_bound_and_never_a_checkpoint_twice(gateway):
    count = 2 * FETCHES_PER_REQUEST + 4
    cids = [gateway.storage.add_bytes(checkpoint(i, 1.0 + i)) for i in range(count)]
    gateway.commit(cids)

    shown: list[str] = []
    for _ in range(3):
        metrics = gateway.metrics()
        reads = gateway.checkpoint_reads()
        assert len(reads) == min(FETCHES_PER_REQUEST, count - len(shown))
        assert all(error is None for _, error in reads)
        assert not {cid for cid, _ in reads} & set(shown)
        shown += [cid for cid, _ in reads]
        assert [u["cid"] for u in metrics["units"] if u["loss"] is not None] == [
            cid for cid in cids if cid in shown
        ]
    assert sorted(shown) == sorted(cids)

    metrics = gateway.metrics()  # every figure from the gateway's own record: no read at all
    assert gateway.reads == []
    assert losses(metrics) == [1.0 + i for i in range(count)]
    assert metrics["units_done"] == count and metrics["loss"] == 1.0 + count - 1


def junk_sorting_first(good: list[str], count: int) -> dict[str, bytes]:
    """`count` blobs that are no checkpoint, each under a CID that sorts before every good one,
    so a request that picks its reads in CID order meets them first."""
    junk: dict[str, bytes] = {}
    n = 0
    while len(junk) < count:
        blob = b"not a checkpoint %d" % n
        cid = str(only_hash(blob))
        if cid < min(good):
            junk[cid] = blob
        n += 1
    return junk


def test_checkpoints_that_failed_are_passed_over_not_read_by_every_request(gateway):
    """Junk that sorts first would otherwise take every request's reads, each time again, and
    the job's real checkpoints would never show their figures."""
    good = [gateway.storage.add_bytes(checkpoint(i, 2.0 + i)) for i in range(4)]
    junk = junk_sorting_first(good, FETCHES_PER_REQUEST)
    for blob in junk.values():
        gateway.storage.add_bytes(blob)
    gateway.commit(sorted(junk) + good)

    first = gateway.metrics()
    assert sorted(gateway.checkpoint_reads()) == sorted((cid, None) for cid in junk)
    assert losses(first) == [None] * (len(junk) + len(good))

    second = gateway.metrics()
    assert sorted(cid for cid, _ in gateway.checkpoint_reads()) == sorted(good)
    assert losses(second) == [None] * len(junk) + [2.0 + i for i in range(4)]

    gateway.metrics()
    assert gateway.reads == []


def test_an_over_size_checkpoint_is_refused_by_its_declared_size_not_read(gateway):
    """A file DAG of honest sizes over the bound (one leaf linked 174 times, twice over: a few
    blocks that make 590 MiB); read whole it would be held in memory before being refused."""
    root, blocks = dag_bomb(levels=2, leaf=bytes(20 * 1024))
    assert 174 * 174 * 20 * 1024 > MAX_CHECKPOINT_BYTES
    put_blocks(url_of(gateway.storage.api_addr), blocks)
    gateway.commit([str(root)])

    metrics = gateway.metrics()
    reads = gateway.reads[:]
    assert [r for r in reads if r[0] != "block"] == [(str(root), ContentTooLarge)]
    assert [r for r in reads if r[0] == "block"] == [("block", str(root))]
    assert losses(metrics) == [None]
    gateway.reads.clear()
    gateway.metrics()
    assert gateway.reads == []


def url_of(multiaddr: str) -> str:
    parts = multiaddr.split("/")
    return f"http://{parts[2]}:{parts[4]}"


MALFORMED = {
    "no metadata": dump_tagged(CHECKPOINTS.tag, {"state": {"progress": {"step": 1}}}),
    "no state": dump_tagged(CHECKPOINTS.tag, {"metadata": {"metrics": {"loss": 1.0}}}),
    "a state that is a list": dump_tagged(CHECKPOINTS.tag, {"state": [1], "metadata": {}}),
    "another format": dump_tagged("zoo-bundle/1", {"state": {}, "metadata": {}}),
    "not a unit file": b"\xff" * 64,
    "metrics that are not a mapping": Checkpoint({}, {"metrics": "loss=0.1"}).to_bytes(),
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_a_malformed_checkpoint_shows_no_figures_and_never_a_500(gateway, kind):
    cid = gateway.storage.add_bytes(MALFORMED[kind])
    gateway.commit([cid])

    metrics = gateway.metrics()
    [unit] = metrics["units"]
    assert unit["cid"] == cid
    assert [unit[field] for field in METRIC_FIELDS] == [None] * len(METRIC_FIELDS)
    result = gateway.client.get(f"/jobs/{JOB}/result")
    assert result.status_code == 200, result.text
    assert (result.json()["cid"], result.json()["state_verified"]) == (
        cid,
        None if kind != "metrics that are not a mapping" else False,
    )
