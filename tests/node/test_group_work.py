"""Group jobs on the market: units per slot, rank bundles, and where a group meets."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import threading
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from marketplace.processes import free_port
from marketplace.protocol.execution import ExecutionClass
from marketplace.protocol.rank_bundle import (
    RankBundle,
    RankUnit,
    RecordedRound,
    load_rank_bundle,
    rank_bundle,
)
from marketplace.protocol.round_signatures import Tenure
from marketplace.protocol.units import units_per_node
from marketplace.storage import ContentNotFound
from node.daemon import group_worker
from node.daemon.group_worker import HOLDERS, GroupFailed, GroupWorker, meeting_point
from node.daemon.worker import BadInput, Worker
from node.distributed.exchange import aggregate_path, recorded_round, settle_round, update_path
from node.distributed.group import GroupConfig
from node.distributed.job import group_config
from node.distributed.quorum import RoundBoard, board_rule
from node.distributed.rank_unit import rank_class, unit_path
from node.distributed.signing import local_signing
from node.distributed.store import GroupStore, StoreHost
from node.engine import load_spec
from verifier import rank_casebook

SPECS = Path(__file__).resolve().parents[2] / "node" / "specs"
THREE = GroupConfig(3)  # a group of three ranks that exchange through gloo


def test_a_group_job_delivers_one_unit_per_round_and_a_single_job_one_per_checkpoint():
    assert units_per_node(load_spec(SPECS / "tiny-diloco-3.yaml")) == 60 // 20
    assert units_per_node(load_spec(SPECS / "tiny-ddp-3.yaml")) == 60 // 20  # checkpoint.every
    assert units_per_node(load_spec(SPECS / "tiny-diloco.yaml")) == 1200 // 100
    assert units_per_node(load_spec(SPECS / "tiny.yaml")) == 300 // 50


def test_a_rank_bundle_keeps_the_round_inputs_and_the_payload_bit_for_bit():
    unit = RankUnit(2, 5, {"step": 7, "weights": torch.arange(4.0)}, torch.ones(3))
    loaded, payload, weights, *_ = load_rank_bundle(rank_bundle(unit, b"\x00\x01payload"))
    assert (loaded.rank, loaded.round_, loaded.trainer["step"]) == (2, 5, 7)
    assert torch.equal(loaded.trainer["weights"], unit.trainer["weights"])
    assert torch.equal(loaded.residual, unit.residual)
    assert payload == b"\x00\x01payload"
    assert weights is None


def test_a_ddp_bundle_keeps_what_every_member_sent_at_each_step():
    unit = RankUnit(1, 0, {"step": 0}, None)
    rounds = [RecordedRound([0, 1, 2], [b"a", b"b", b"c"]), RecordedRound([0, 1], [b"d", b"e"])]
    bundle = load_rank_bundle(rank_bundle(unit, b"be", rounds=rounds))
    assert bundle.rounds == rounds
    assert load_rank_bundle(rank_bundle(unit, b"be")).rounds is None  # a DiLoCo round's


def test_a_bundle_records_the_class_its_rank_trained_in():
    """What a verifier reads to choose between the hash and the slack (verifier.rank_recompute)."""
    spec = load_spec(SPECS / "tiny-ddp-3.yaml")
    execution = rank_class(spec).to_dict()
    unit = RankUnit(1, 0, {"step": 0}, None)
    bundle = load_rank_bundle(rank_bundle(unit, b"be", execution=execution))
    assert ExecutionClass.from_dict(bundle.execution) == rank_class(spec)
    assert bundle.execution["num_threads"] == 1 and bundle.execution["device"] == "cpu"
    assert load_rank_bundle(rank_bundle(unit, b"be")).execution is None


def test_a_last_round_bundle_holds_the_trained_model():
    unit = RankUnit(0, 2, {"step": 60}, None)
    model = {"wte.weight": torch.randn(5, 3)}
    weights = load_rank_bundle(rank_bundle(unit, b"payload", model)).weights
    assert weights.keys() == model.keys() and torch.equal(
        weights["wte.weight"], model["wte.weight"]
    )


def test_bytes_that_are_not_a_rank_bundle_are_refused():
    with pytest.raises(ValueError, match="not a rank bundle"):
        load_rank_bundle(b"not torch at all")


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("tcp://127.0.0.1:29500", ("127.0.0.1", 29500)),
        ("https://node.example:8443/api", ("node.example", 8443)),
        ("10.0.0.2:7000", ("10.0.0.2", 7000)),
    ],
)
def test_a_group_meets_at_the_endpoints_host_and_port(endpoint, expected):
    assert meeting_point(endpoint) == expected


@pytest.mark.parametrize("endpoint", ["", "devnet://provider-0", "https://node.example", "h:99999"])
def test_an_endpoint_without_host_and_port_is_no_meeting_point(endpoint):
    with pytest.raises(GroupFailed, match="names no host and port"):
        meeting_point(endpoint)


class FlakyChain:
    """A node's view of the chain whose RPC node is out of reach for its first `outage` looks."""

    def __init__(self, outage: int):
        self.outage, self.looks = outage, 0

    def _look(self) -> None:
        self.looks += 1
        if self.looks <= self.outage:
            raise ConnectionError("the RPC node is restarting")

    def deliverable(self, job_id: int, slot_id: int) -> tuple[dict, dict]:
        self._look()
        return {}, {}

    def slot(self, job_id: int, slot: int) -> dict:
        self._look()
        return {"provider": f"0x{slot:040x}"}


def test_a_chain_out_of_reach_for_a_while_does_not_cost_the_group_its_rank(tmp_path, monkeypatch):
    """The daemon looks at the chain while its rank trains a unit: a look that fails is tried
    again, rather than ending the rank's process (a ddp group cannot take a rank back)."""
    monkeypatch.setattr(group_worker, "CHAIN_POLL", 0.05)
    chain = FlakyChain(outage=3)
    node = GroupWorker(SimpleNamespace(deliverable=chain.deliverable, ledger=chain), tmp_path)
    node._host = f"0x{0:040x}"  # slot 0's provider when the rank joined
    rank = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
    rank.start()
    following = unit_path(tmp_path, 1, 0)
    following.parent.mkdir(parents=True)
    finishing = threading.Timer(1.5, following.touch)  # the rank saves its next unit's inputs
    finishing.start()
    try:
        assert node._await_unit(rank, 7, 0, 0, tmp_path, THREE, range(1), threading.Event())
        assert rank.is_alive()
    finally:
        finishing.cancel()
        rank.terminate()
        rank.join()
    assert chain.looks > chain.outage  # it looked again once the chain was back
    holders = [f"0x{s:040x}" for s in range(3)]
    assert json.loads((tmp_path / HOLDERS).read_text()) == {"holders": holders, "open_through": 0}


class SlotChain:
    """A node's view of the chain where slot 0's provider is `host` until `moves_after` looks,
    then another's."""

    def __init__(self, host: str, moves_after: int):
        self.host, self.moves_after, self.looks = host, moves_after, 0

    def deliverable(self, job_id: int, slot_id: int) -> tuple[dict, dict]:
        return {}, {}

    def slot(self, job_id: int, slot: int) -> dict:
        if slot == 0:
            self.looks += 1
            if self.looks > self.moves_after:
                return {"provider": "0x" + "ab" * 20}
        return {"provider": self.host}


def test_a_rank_whose_group_host_changed_hands_is_let_go_to_meet_it_again(tmp_path, monkeypatch):
    """Slot 0's provider hosts the group's board: once slot 0 changes hands the board is gone
    with its holder, and the rank, waiting on it, is let go to start again at the next holder's
    rather than waiting out the board's timeout."""
    monkeypatch.setattr(group_worker, "CHAIN_POLL", 0.05)
    chain = SlotChain("0x" + "cd" * 20, moves_after=2)
    node = GroupWorker(SimpleNamespace(deliverable=chain.deliverable, ledger=chain), tmp_path)
    node._host = chain.host  # slot 0's provider when the rank joined
    rank = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
    rank.start()
    try:
        assert not node._await_unit(rank, 7, 1, 0, tmp_path, THREE, range(1), threading.Event())
        assert rank.is_alive() and chain.looks == 3  # let go at the first look after the move
    finally:
        rank.terminate()
        rank.join()


class CommittedUnits:
    """A node's view of the chain where slot 0's provider stays put and each slot has
    committed `done[slot]` units."""

    def __init__(self, done: list[int]):
        self.done = done

    def deliverable(self, job_id: int, slot_id: int) -> tuple[dict, dict]:
        return {}, {}

    def slot(self, job_id: int, slot: int) -> dict:
        return {"provider": f"0x{slot:040x}", "unitsDone": self.done[slot]}


@pytest.mark.parametrize(
    ("posted_ago", "done", "let_go"),
    [
        (60.0, [2, 2, 3], True),  # slot 2 committed the unit: the round closed elsewhere
        (60.0, [2, 2, 2], False),  # no one has: the others are behind, and will post
        (0.0, [2, 2, 3], False),  # posted just now: the board may close it yet
    ],
)
def test_a_rank_waiting_on_a_round_the_group_committed_is_let_go_to_settle_it(
    tmp_path, monkeypatch, posted_ago, done, let_go
):
    """A rank that starts again reads which rounds the group committed; a commit that lands
    just after is gone through as settled by the others, and the board never closes that round
    for this rank. Once its post is older than the round's deadline while another slot committed
    the unit, the rank is let go, to start again with the round settled, rather than waiting out
    the board's timeout (past its checkpoint deadline)."""
    monkeypatch.setattr(group_worker, "CHAIN_POLL", 0.05)
    chain = CommittedUnits(done)
    node = GroupWorker(SimpleNamespace(deliverable=chain.deliverable, ledger=chain), tmp_path)
    node._host = f"0x{0:040x}"
    posted = update_path(tmp_path, 2, 1)  # rank 1's payload of round 2, its unit 2
    posted.parent.mkdir(parents=True)
    posted.write_bytes(b"payload")
    os.utime(posted, (time.time() - posted_ago,) * 2)
    following = unit_path(tmp_path, 3, 1)
    following.parent.mkdir(parents=True)
    finishing = threading.Timer(1.0, following.touch)  # else the round closes after all
    finishing.start()
    config = GroupConfig(3, quorum=2, deadline_s=3.0)
    rank = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
    rank.start()
    try:
        waited = node._await_unit(rank, 7, 1, 2, tmp_path, config, range(2, 3), threading.Event())
        assert waited is not let_go
        assert following.exists() is not let_go  # let go at once, not once the unit was done
    finally:
        finishing.cancel()
        rank.terminate()
        rank.join()


class CommittedGroup:
    """The chain and IPFS as a node sees them for a trained group: slot `s` committed its first
    `done[s]` units, each slot was assigned to its local signer only."""

    def __init__(self, spec, folder: Path, done: list[int]):
        self.done, self.store = done, {}
        self.commitments = {
            (rank, index): rank_casebook.committed_bundle(spec, folder, rank, index)
            for rank, units in enumerate(done)
            for index in range(units)
        }
        self.cids = {
            key: rank_casebook.pin(self.store, bundle)
            for key, (_, bundle) in self.commitments.items()
        }
        self.holders = local_signing(len(done)).addresses
        self.tenures = [Tenure(0)] * len(done)  # by slot, the units its holder could sign for
        self.flagged: list[tuple[int, int, int]] = []

    def slot(self, job_id: int, slot: int) -> dict:
        return {"unitsDone": self.done[slot], "provider": self.holders[slot]}

    def slot_tenures(self, job_id: int, slots: int) -> list[dict[str, Tenure]]:
        return [{self.holders[slot].lower(): self.tenures[slot]} for slot in range(slots)]

    def committed(self, job_id: int, slot: int, index: int) -> SimpleNamespace:
        commitment, _ = self.commitments[slot, index]
        return SimpleNamespace(
            job_id=job_id,
            slot=slot,
            index=index,
            cid=self.cids[slot, index],
            state_hash=bytes.fromhex(commitment),
        )

    def committed_cid(self, job_id: int, slot: int, index: int) -> str:
        return self.cids[slot, index]

    def cat(self, cid: str, max_bytes: int | None = None) -> bytes:
        if cid not in self.store:
            raise ContentNotFound(f"{cid} is on no node")
        return self.store[cid]

    def worker(self) -> SimpleNamespace:
        """A provider's worker over this group: its commit path's reads, and flagging a unit
        as `Worker.reject_input` does, onto the chain as this group records it."""
        worker = SimpleNamespace(
            ledger=self,
            storage=self,
            committed=self.committed,
            committed_cid=self.committed_cid,
            outbox=SimpleNamespace(send=lambda key, call: self.flagged.append(call)),
        )
        self.flag_unit_call = lambda unit: (unit.job_id, unit.slot, unit.index)
        worker.reject_input = lambda unit, reason: Worker.reject_input(worker, unit, reason)
        return worker


@pytest.fixture(scope="module")
def committed_group(tmp_path_factory):
    """A DiLoCo group of three trained for four rounds, one a unit."""
    spec = rank_casebook.group_spec("random-8bit", units=4, every=3, strategy="diloco")
    trained = tmp_path_factory.mktemp("group")
    rank_casebook.train_group(spec, trained)
    return spec, trained


def _settled(
    spec,
    group: CommittedGroup,
    config: GroupConfig,
    folder: Path,
    own: dict[int, RecordedRound] | None = None,
) -> list[bool]:
    """Which of the four rounds slot 2's rank, starting again from its unit 0, writes down."""
    taken_over = load_rank_bundle(group.store[group.cids[2, 0]])
    GroupWorker(group.worker(), folder)._settle(0, taken_over, spec, config, folder, own or {})
    return [aggregate_path(folder, r).exists() for r in range(4)]


@pytest.mark.slow
def test_a_rank_starting_again_settles_the_rounds_the_group_committed_since_its_last_unit(
    committed_group, tmp_path
):
    """Slot 2 committed unit 0 only, slot 0 units 0 and 1, slot 1 units 0 to 2. Round 0 as
    slot 2 recorded it, round 1 as slot 0 did (the lowest that committed it), round 2 as slot 1
    did; round 3, which nobody committed, the rank exchanges."""
    spec, trained = committed_group
    group = CommittedGroup(spec, trained, done=[2, 3, 1])
    assert _settled(spec, group, group_config(spec), tmp_path) == [True, True, True, False]
    for round_, slot in [(0, 2), (1, 0), (2, 1)]:
        committed = load_rank_bundle(group.store[group.cids[slot, round_]]).rounds
        assert committed is not None
        assert recorded_round(tmp_path, round_) == committed[0]


def _unsigned(recorded: RecordedRound) -> RecordedRound:
    return recorded._replace(payloads=[bytes(len(p)) for p in recorded.payloads])


def _cut_to(members: list[int]):
    def cut(recorded: RecordedRound) -> RecordedRound:
        kept = [recorded.members.index(m) for m in members]
        assert recorded.signatures is not None
        return RecordedRound(
            members,
            [recorded.payloads[i] for i in kept],
            [recorded.signatures[i] for i in kept],
        )

    return cut


def _recommit(group: CommittedGroup, slot: int, index: int, record) -> RecordedRound:
    """Slot `slot`'s unit `index` as committed with its round recorded as `record` makes it."""
    honest = load_rank_bundle(group.store[group.cids[slot, index]])
    assert honest.rounds is not None
    [recorded] = [record(r) for r in honest.rounds]
    group.store[group.cids[slot, index]] = rank_bundle(
        honest.unit, honest.payload, rounds=[recorded], execution=honest.execution
    )
    return recorded


@pytest.mark.slow
@pytest.mark.parametrize(
    ("record", "quorum", "settled"),
    [
        (_unsigned, None, [True, False, False, False]),
        (_cut_to([0]), None, [True, False, False, False]),
        (_cut_to([0, 1]), None, [True, False, False, False]),
        (_cut_to([0, 1]), 2, [True, True, True, False]),
    ],
    ids=["payloads-no-member-signed", "its-recorder-alone", "short-of-every-rank", "a-quorum"],
)
def test_a_committed_record_that_could_not_have_closed_on_the_board_settles_nothing(
    committed_group, tmp_path, record, quorum, settled
):
    """Slots 0 and 1, the two that committed unit 1, commit it with its round recorded
    otherwise: with payloads no member signed, or with their own signed payloads but fewer
    members than a round closes with (its recorder alone would let a co-member that commits
    early move where a rank waiting on the board goes on from). Slot 2's rank settles nothing
    from that round on, and exchanges it."""
    spec, trained = committed_group
    group = CommittedGroup(spec, trained, done=[2, 3, 1])
    _recommit(group, 0, 1, record)
    _recommit(group, 1, 1, record)
    config = group_config(spec)
    if quorum is not None:
        config = replace(config, quorum=quorum, deadline_s=1.0)
    assert _settled(spec, group, config, tmp_path) == settled


@pytest.mark.slow
def test_a_signature_from_before_its_signers_tenure_vouches_for_no_record(
    committed_group, tmp_path
):
    """Slot 1's provider, as the chain has it, was assigned the slot only when its unit 2 was
    next (it may sign from unit 1's round on): its signature on round 0 stands for nothing, so
    the rank settles no round from the record holding it, its own of round 0, and exchanges
    from there. Before, a signature of any provider the slot was ever assigned to vouched for
    every round of the job."""
    spec, trained = committed_group
    group = CommittedGroup(spec, trained, done=[2, 3, 1])
    group.tenures[1] = Tenure(1)
    assert _settled(spec, group, group_config(spec), tmp_path) == [False] * 4


@pytest.mark.slow
def test_a_signature_from_after_its_signers_tenure_vouches_for_no_record(committed_group, tmp_path):
    """Slot 1's provider left the slot when the group could have gone no further than its
    unit 0 (round 0): its signature on round 1 stands for nothing, so the rank settles round 0
    alone and exchanges from round 1. Before, a former holder's signature vouched for every
    round to the job's end."""
    spec, trained = committed_group
    group = CommittedGroup(spec, trained, done=[2, 3, 1])
    group.tenures[1] = Tenure(0, 0)
    assert _settled(spec, group, group_config(spec), tmp_path) == [True, False, False, False]


@pytest.mark.slow
def test_a_record_that_does_not_hold_costs_the_rank_a_look_at_the_next_slots(
    committed_group, tmp_path
):
    """Slot 0, the lowest that committed unit 1, records its round as its own payload alone:
    the rank settles the round from slot 1's record instead, rather than meeting a round no one
    will post again."""
    spec, trained = committed_group
    group = CommittedGroup(spec, trained, done=[2, 3, 1])
    _recommit(group, 0, 1, _cut_to([0]))
    del group.store[group.cids[1, 2]]  # and slot 1's unit 2 is out of reach: no one else has it
    assert _settled(spec, group, group_config(spec), tmp_path) == [True, True, False, False]
    committed = load_rank_bundle(group.store[group.cids[1, 1]]).rounds
    assert committed is not None
    assert recorded_round(tmp_path, 1) == committed[0]


@pytest.mark.slow
def test_a_rank_starting_again_goes_through_the_rounds_it_went_through_as_it_recorded_them(
    committed_group, tmp_path
):
    """Rank 2 went through round 1 with ranks 1 and 2 alone (what its board showed it) and
    signed its payloads from there on; slot 0 committed the round with all three. Starting
    again, the rank must meet the round as it did, or it would sign other payloads for the
    rounds it signed already, and a peer's record of the first would fail it: its own record,
    read back from its folder, comes first."""
    spec, trained = committed_group
    group = CommittedGroup(spec, trained, done=[2, 3, 1])
    committed = load_rank_bundle(group.store[group.cids[0, 1]]).rounds
    assert committed is not None
    seen = _cut_to([1, 2])(committed[0])
    attempt = tmp_path / "attempt"
    settle_round(attempt, 1, seen)
    broken = aggregate_path(attempt, 3)  # a round whose files did not all get written
    broken.parent.mkdir(parents=True)
    broken.write_text('{"members": [0, 1]}')
    own = group_worker._own_rounds(attempt)
    assert own == {1: seen}
    config = replace(group_config(spec), quorum=2, deadline_s=1.0)
    assert _settled(spec, group, config, tmp_path / "again", own) == [True, True, True, False]
    assert recorded_round(tmp_path / "again", 1) == seen


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("withheld", "its rank bundle cannot be read"),
        ("another-unit", "its rank bundle is another rank's or unit's"),
        ("another-payload", "its rank bundle does not hold the payload it committed"),
        ("a-column-residual", "the unit's residual is not a finite float32 vector"),
    ],
)
def test_a_slot_taken_over_from_a_unit_that_does_not_hold_flags_it_and_trains_nothing(
    committed_group, tmp_path, tamper, reason
):
    """The slot's last committed unit is what its successor starts from: one whose bundle is
    withheld, is another unit's, holds another payload than its commitment or inputs no rank
    saves is flagged, so verifiers re-run it (a confirmed failure rolls the slot back past it),
    and nothing is trained on it."""
    spec, trained = committed_group
    group = CommittedGroup(spec, trained, done=[2, 3, 1])
    cid = group.cids[1, 1]
    if tamper == "withheld":
        del group.store[cid]
    elif tamper == "another-unit":
        group.store[cid] = group.store[group.cids[1, 0]]
    elif tamper == "another-payload":
        bundle = load_rank_bundle(group.store[cid])
        group.store[cid] = rank_bundle(
            bundle.unit, bytes(len(bundle.payload)), rounds=bundle.rounds,
            execution=bundle.execution,
        )  # fmt: skip
    else:  # broadcast by the successor's run into a (M, N) vector: out of memory for a large M
        bundle = load_rank_bundle(group.store[cid])
        group.store[cid] = rank_bundle(
            replace(bundle.unit, residual=torch.zeros(4, 1)), bundle.payload,
            rounds=bundle.rounds, execution=bundle.execution,
        )  # fmt: skip
    node = GroupWorker(group.worker(), tmp_path)
    with pytest.raises(BadInput, match=reason):
        node._last_unit(0, 1, 1, spec, uses_board=True)
    assert group.flagged == [(0, 1, 1)]
    assert isinstance(node._last_unit(0, 1, 2, spec, uses_board=True), RankBundle)


def test_the_host_clears_its_board_of_the_rounds_every_slot_committed(tmp_path):
    """A round stays on the host's board until every slot committed its unit, then the host's
    daemon takes it off, so the board does not grow with the job; a look at the chain that
    fails leaves the rounds for the next commit."""
    spec = load_spec(SPECS / "tiny-diloco-3.yaml")
    config = replace(group_config(spec), deadline_s=5.0)  # rounds with a deadline: a board
    port = free_port()
    signing, budget = config.round_signing, config.store_budget(spec)
    with StoreHost("127.0.0.1", port, signing, budget, rules=board_rule):
        stores = [
            GroupStore("127.0.0.1", port, rank, signing, timedelta(seconds=5)) for rank in range(3)
        ]
        for round_, rank in itertools.product(range(4), range(3)):
            RoundBoard(stores[rank], 3, 2, 0.0).post(round_, rank, b"payload %d" % rank)
        store, posted = stores[1], RoundBoard(stores[1], 3, 2, 0.0)  # a rank's side of the board
        chain = CommittedUnits([3, 2, 3])
        node = GroupWorker(SimpleNamespace(ledger=chain), tmp_path)

        def board() -> RoundBoard:
            return group_worker._host_board("127.0.0.1", port, config)

        def on_board() -> list[int]:
            return [round_ for round_ in range(4) if store.check([f"rounds/{round_}/1"])]

        assert node._clear_board(7, spec, config, board, 0) == 2  # slot 1 has yet to commit 2
        assert on_board() == [2, 3]
        assert posted.payloads(2, [0, 1, 2], 100) == [b"payload 0", b"payload 1", b"payload 2"]
        node.worker.ledger = FlakyChain(outage=1)
        assert node._clear_board(7, spec, config, board, 2) == 2
        node.worker.ledger = CommittedUnits([4, 4, 4])
        assert node._clear_board(7, spec, config, board, 2) == 4
        assert on_board() == [] and store.num_keys() == 0
