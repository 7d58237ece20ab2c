"""The rank hosting a DiLoCo group's round board rewrites an honest rank's posted payload in
every round. Unsigned, every rank aggregated the forgery and the honest rank, whose record of its
own payload the others contradicted, failed verification while the forger passed. Signed, the
honest ranks refuse the forgery and every rank's every round passes."""

from __future__ import annotations

import time

import pytest

from marketplace.protocol.rank_bundle import load_rank_bundle
from node.distributed.diloco import train_diloco
from node.distributed.job import group_config
from node.distributed.quorum import RoundBoard
from node.distributed.rank_unit import rank_class
from node.distributed.store import ANY_RANK, StoreHost
from verifier import rank_casebook
from verifier.rank_recompute import judge_rank

HOST, VICTIM, RANKS = 0, 1, 3
_post = RoundBoard.post
_handle = StoreHost._handle


def _obeying_no_rule(store: StoreHost, rank: int, body: bytes) -> bytes:
    """The store as a forging host runs it: its own writes obey no key rule (the rules bind the
    members, not the process the store lives in)."""
    if rank != HOST:
        return _handle(store, rank, body)
    rules, store.rules = store.rules, lambda key: ANY_RANK
    try:
        return _handle(store, rank, body)
    finally:
        store.rules = rules


def _rewriting_post(board: RoundBoard, round_: int, rank: int, payload: bytes) -> None:
    """The host's post: wait for the victim's, rewrite a byte of its payload (past the
    signature), then post its own."""
    if rank == HOST:
        key = f"{round_}/{VICTIM}"
        while not board.store.check([key]):
            time.sleep(0.005)
        forged = bytearray(board.store.get(key))
        forged[-1] ^= 0x05
        board.store.set(key, bytes(forged))  # type: ignore[arg-type]
    _post(board, round_, rank, payload)


class HostRewrites:
    """Sends every update as it is; in the host's process, makes its board posts rewrite the
    victim's first, through a store that lets it write any key, as a host's own store can (a
    Tamper is called in the rank's own process, before it posts)."""

    def __call__(self, rank: int, update):
        if rank == HOST:
            RoundBoard.post = _rewriting_post  # type: ignore[method-assign]
            StoreHost._handle = _obeying_no_rule  # type: ignore[method-assign]
        return update


@pytest.mark.slow
def test_a_host_rewriting_a_ranks_payload_gets_nobody_failed(tmp_path):
    spec = rank_casebook.group_spec("topk-2bit", units=2, every=4, strategy="diloco")
    distributed = spec.distributed.model_copy(update={"unit_deadline_s": 60.0})
    spec = spec.model_copy(update={"distributed": distributed})
    config = group_config(spec, updates_dir=tmp_path)
    assert config.uses_board
    train_diloco(spec, config, tamper=HostRewrites())
    store: rank_casebook.Store = {}
    committed = {
        (rank, index): rank_casebook.committed_bundle(spec, tmp_path, rank, index, store)
        for rank in range(RANKS)
        for index in range(2)
    }
    # the forgery was posted every round, and every honest rank refused it
    for index in range(2):
        recorded = load_rank_bundle(committed[2, index][1]).rounds
        assert recorded is not None and recorded[0].members == [0, 2]
    own = rank_class(spec).class_id()
    for (rank, index), (commitment, bundle) in committed.items():
        peers = {p: committed[p, index] for p in range(RANKS) if p != rank}
        verdict = judge_rank(
            spec,
            rank,
            index,
            commitment,
            bundle,
            peers,
            committed[rank, index - 1] if index else None,
            signers=rank_casebook.local_signers(spec),
            reproduces=lambda class_id: class_id == own,
            states=rank_casebook.stored(store),
            own_previous=True,
        )
        assert verdict.passed is True, (rank, index, verdict.reason)
