"""A provider bids for a group job only with an endpoint a group could meet at."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_support import SPEC

from marketplace.chain.deploy import ZEN
from marketplace.chain.ledger import JobRequest
from marketplace.protocol.terms import Tier
from marketplace.protocol.units import units_per_node
from marketplace.runtime.outbox import Outbox
from marketplace.storage import Storage
from node.daemon.group_worker import GroupWorker
from node.daemon.journal import Journal
from node.daemon.worker import JobUnfit, Specs, Worker
from node.engine import load_spec

pytestmark = pytest.mark.anvil

GROUP_SPEC = Path(__file__).resolve().parents[2] / "node" / "specs" / "tiny-diloco-3.yaml"


def test_a_node_without_a_rendezvous_endpoint_refuses_group_jobs_only(
    ledger, cast, onboarded, ipfs_nodes, tmp_path
):
    journal = Journal(tmp_path / "journal.sqlite3")
    with Storage(ipfs_nodes[0].multiaddr, []) as storage:
        worker = Worker(
            ledger,
            onboarded,
            journal,
            Outbox(ledger.w3, onboarded, journal),
            Specs(ledger, storage),
            storage,
            replicas=1,
        )
        group = GroupWorker(worker, tmp_path / "groups")

        def job(path: Path) -> tuple[int, dict]:
            spec = load_spec(path)
            request = JobRequest(
                spec_cid=storage.add_bytes(path.read_bytes()),
                tier=Tier.COMMUNITY,
                nodes=spec.distributed.nodes,
                units_per_node=units_per_node(spec),
                checkpoint_interval=300,
                sample_rate_bps=0,
                max_price=100 * ZEN,
                budget=300 * ZEN,
            )
            job_id = ledger.create_job(cast.user, request)
            return job_id, ledger.job(job_id)

        group_job, single_job = job(GROUP_SPEC), job(SPEC)
        # `node register` without --endpoint registered none.
        with pytest.raises(JobUnfit, match="needs a rendezvous endpoint"):
            group.check_job(*group_job)
        group.check_job(*single_job)
        for job_id, _ in (group_job, single_job):  # no daemon of a later test should take them
            ledger.send(ledger.market.functions.cancelJob(job_id), cast.user)
    journal.close()
