"""A provider bids only for jobs it could deliver: a group job needs an endpoint a group could
meet at, and a fine-tuning job the CID of the weights it starts from."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
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
LLAMA_SPEC = GROUP_SPEC.with_name("llama-tiny.yaml")


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


def test_a_fine_tuning_job_whose_base_is_not_pinned_is_not_bid_on(ledger, cast, ipfs_nodes):
    """A spec submitted with `from: org/name@N` alone (not through `train`, which pins the folder
    CID) names weights nobody could load the same: no node bids on it."""
    spec = yaml.safe_load(LLAMA_SPEC.read_text())
    spec["model"]["from"] = "acme/base@1"
    text = yaml.safe_dump(spec)
    with Storage(ipfs_nodes[0].multiaddr, []) as storage:
        request = JobRequest(
            spec_cid=storage.add_bytes(text.encode()),
            tier=Tier.COMMUNITY,
            nodes=1,
            units_per_node=units_per_node(load_spec(LLAMA_SPEC)),
            checkpoint_interval=300,
            sample_rate_bps=0,
            max_price=100 * ZEN,
            budget=300 * ZEN,
        )
        job_id = ledger.create_job(cast.user, request)
        with pytest.raises(JobUnfit, match="names acme/base@1 but not its folder's CID"):
            Specs(ledger, storage).check_job(job_id, ledger.job(job_id))
        ledger.send(ledger.market.functions.cancelJob(job_id), cast.user)
