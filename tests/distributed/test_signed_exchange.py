"""What a rank sends carries its signature: the rank hosting the round board's store cannot make
the others aggregate a payload its sender did not send, whatever it writes there."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from eth_account import Account

from marketplace.processes import free_port
from marketplace.protocol.round_signatures import SIGNATURE_BYTES
from node.distributed.aggregation import Aggregate
from node.distributed.exchange import Exchange, ReplayMismatch, recorded_round, settle_round
from node.distributed.group import GroupConfig
from node.distributed.signing import RoundSigning, local_key, local_signing

RANKS, ROUND, NUMEL = 3, 4, 64
SIGNING = local_signing(RANKS)


@pytest.fixture
def store() -> dist.TCPStore:
    """The group's store, which rank 0 hosts."""
    return dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=10))


def over(store: dist.TCPStore, signings: list[RoundSigning]) -> list[Exchange]:
    """The ranks' exchanges over one board, in this process, each rank signing as given."""
    return [
        Exchange(rank, GroupConfig(ranks=RANKS, deadline_s=30.0, signing=signing), store)
        for rank, signing in enumerate(signings)
    ]


@pytest.fixture
def exchanges(store) -> list[Exchange]:
    return over(store, [SIGNING] * RANKS)


def update(rank: int) -> torch.Tensor:
    return torch.randn(NUMEL, generator=torch.Generator().manual_seed(rank))


def run_round(
    exchanges: list[Exchange], ranks: list[int], round_: int = ROUND
) -> dict[int, Aggregate]:
    """The ranks' exchanges of a round, each in a thread of its own, as their processes would."""
    results: dict[int, Aggregate] = {}

    def run(rank: int) -> None:
        results[rank] = exchanges[rank](update(rank), round_)

    threads = [threading.Thread(target=run, args=(rank,)) for rank in ranks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def rewritten_by_the_host(exchanges: list[Exchange], rank: int, forge) -> None:
    """Wait for `rank`'s post and rewrite it as the host may: any key, any bytes."""
    board = exchanges[0].board
    assert board is not None
    key = f"{ROUND}/{rank}"
    while not board.store.check([key]):
        time.sleep(0.005)
    part = f"{key}/0"  # a small payload goes up whole
    posted = board.store.get(part)
    board.store.set(part, forge(posted[:SIGNATURE_BYTES], posted[SIGNATURE_BYTES:]))  # type: ignore[arg-type]


def test_an_honest_round_aggregates_every_signed_payload(exchanges):
    results = run_round(exchanges, list(range(RANKS)))
    assert all(exchange.members[-1] == [0, 1, 2] for exchange in exchanges)
    assert all(torch.equal(results[0].value, results[r].value) for r in range(RANKS))


@pytest.mark.parametrize(
    "forge",
    [
        # another well-formed payload under rank 1's signature
        lambda signature, payload: signature + bytes([payload[0] ^ 0x05]) + payload[1:],
        # another payload under the host's own signature, posted as rank 1's
        lambda signature, payload: SIGNING.sign(0, ROUND, payload[::-1]) + payload[::-1],
        # rank 1's own signature from another round
        lambda signature, payload: SIGNING.sign(1, ROUND + 1, payload) + payload,
    ],
    ids=["payload-changed", "host-signed", "other-round"],
)
def test_a_payload_the_host_rewrote_is_refused_by_every_honest_rank(exchanges, forge):
    """Unsigned, the host's rewrite of rank 1's payload was aggregated by everyone, and rank 1's
    own record of what it sent was then outvoted: an honest rank slashed. Signed, rank 1's
    update is left out of the round (the host can always drop it), and the honest ranks agree."""
    first = threading.Thread(target=lambda: run_round(exchanges, [1]))
    results: dict[int, Aggregate] = {}
    first.start()
    rewritten_by_the_host(exchanges, 1, forge)
    results = run_round(exchanges, [0, 2])
    first.join(timeout=60)
    for honest in (1, 2):
        assert exchanges[honest].members[-1] == [0, 2]
        assert 1 in exchanges[honest].outliers[-1]  # reported, for verifiers to re-run
    assert torch.equal(results[2].value, results[0].value)


def test_a_slot_handed_over_signs_with_its_new_holders_key(store, tmp_path):
    """Rank 1's slot went to another provider: the ranks refuse what its key signs until the
    provider's daemon writes the new holder down, and take it from then on."""
    new_key = local_key(99)
    holders = tmp_path / "holders.json"
    note_holders(holders, SIGNING.addresses, ROUND + 1)
    watching = replace(SIGNING, holders_file=str(holders))
    exchanges = over(store, [watching, replace(SIGNING, keys={1: new_key}), watching])
    run_round(exchanges, list(range(RANKS)))
    assert exchanges[0].members[-1] == exchanges[2].members[-1] == [0, 2]
    addresses = list(SIGNING.addresses)
    addresses[1] = Account.from_key(new_key).address
    note_holders(holders, addresses, ROUND + 1)
    run_round(exchanges, list(range(RANKS)), ROUND + 1)
    assert exchanges[0].members[-1] == exchanges[2].members[-1] == [0, 1, 2]


def test_a_rank_goes_no_further_than_its_daemon_opened_and_then_with_the_holders_read(
    store, tmp_path
):
    """Rank 0's daemon opened the rounds before ROUND: the rank waits there, sending nothing,
    until the daemon, having read the chain after its next commit, opens ROUND with the holders
    it read. Slot 1 had changed hands by then, so its former holder's payload, posted for the
    round, is refused. A former holder's signature stands in a record only so long as this
    (marketplace/protocol/round_signatures.py `slot_tenures`)."""
    holders = tmp_path / "holders.json"
    note_holders(holders, SIGNING.addresses, ROUND - 1)
    exchanges = over(store, [replace(SIGNING, holders_file=str(holders)), SIGNING, SIGNING])
    waiting = threading.Thread(target=run_round, args=(exchanges, [0]))
    waiting.start()
    time.sleep(1.0)
    assert waiting.is_alive() and exchanges[0].commitments == []
    addresses = list(SIGNING.addresses)
    addresses[1] = Account.from_key(local_key(99)).address
    note_holders(holders, addresses, ROUND)
    run_round(exchanges, [1, 2])
    waiting.join(timeout=60)
    assert exchanges[0].members[-1] == [0, 2]
    assert exchanges[2].members[-1] == [0, 1, 2]  # a rank whose daemon had not read it yet


def note_holders(path, addresses, open_through: int) -> None:
    """Write the slots' holders down as a provider's daemon does for its rank."""
    path.write_text(json.dumps({"holders": list(addresses), "open_through": open_through}))


def recording(store: dist.TCPStore, folder, **settings) -> list[Exchange]:
    """The ranks' exchanges over one board, each saving its rounds in `folder`/first-<rank>."""
    return [
        Exchange(
            rank,
            GroupConfig(
                ranks=RANKS,
                signing=SIGNING,
                updates_dir=str(folder / f"first-{rank}"),
                **{"deadline_s": 30.0} | settings,
            ),
            store,
        )
        for rank in range(RANKS)
    ]


def test_a_settled_round_is_gone_through_as_recorded_on_a_new_board(store, tmp_path):
    """The group's host dropped after round 4 closed without rank 2; the group meets again on a
    new board, where rank 2 would be on time. Written down from the committed record, the round
    is gone through as it was: the same members and aggregate, nothing posted to the board."""
    first = recording(store, tmp_path, deadline_s=0.2, quorum=2)
    closed = run_round(first, [0, 1])
    recorded = recorded_round(tmp_path / "first-0", ROUND)
    assert recorded.members == [0, 1] and store.check([f"rounds/{ROUND}/members"])

    board = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=5))
    again = tmp_path / "again-2"
    settle_round(again, ROUND, recorded)
    config = GroupConfig(ranks=RANKS, deadline_s=30.0, signing=SIGNING, updates_dir=str(again))
    rank_2 = Exchange(2, config, board)
    result = rank_2(update(2), ROUND)
    assert torch.equal(result.value, closed[0].value) and rank_2.members == [[0, 1]]
    assert recorded_round(again, ROUND) == recorded
    assert not board.check([f"rounds/{ROUND}/2"])  # nothing was exchanged


def test_a_settled_round_that_holds_another_payload_of_the_rank_stops_it(store, tmp_path):
    """A rank that would send something else than the settled round holds from it cannot go on
    from the group's state: it stops rather than train on from another."""
    first = recording(store, tmp_path)
    run_round(first, list(range(RANKS)))
    recorded = recorded_round(tmp_path / "first-0", ROUND)
    payloads = list(recorded.payloads)
    payloads[1] = payloads[2]
    again = tmp_path / "again-1"
    settle_round(again, ROUND, recorded._replace(payloads=payloads))
    config = GroupConfig(ranks=RANKS, deadline_s=30.0, signing=SIGNING, updates_dir=str(again))
    with pytest.raises(
        ReplayMismatch, match="round 4 was settled with another payload from rank 1"
    ):
        Exchange(1, config, store)(update(1), ROUND)
