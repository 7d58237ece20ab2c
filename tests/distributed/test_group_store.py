"""The group's store: only the slots' holders use it, each within its budget, and it answers as
torch's stores do (gloo's rendezvous and the round board run on it elsewhere in this suite)."""

import json
import logging
import socket
import struct
import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
import torch.distributed as dist
from eth_account import Account

from marketplace.processes import free_port
from node.distributed import store as group_store
from node.distributed.quorum import RoundBoard, board_rule
from node.distributed.signing import RoundSigning, local_signing
from node.distributed.store import (
    CONTROL_BYTES,
    KEY_COST,
    MAX_PENDING,
    NONCE_BYTES,
    GroupStore,
    StoreHost,
    StoreRefused,
    listening_host,
)

QUICK = timedelta(seconds=2)
SIGNING = local_signing(3, job_id=7)


@pytest.fixture
def host():
    with StoreHost("127.0.0.1", free_port(), SIGNING, CONTROL_BYTES, login_s=0.5) as running:
        yield running


def member(host: StoreHost, rank: int, signing: RoundSigning = SIGNING) -> GroupStore:
    return GroupStore(*host.address, rank, signing, QUICK)


def stranger(rank: int) -> RoundSigning:
    """A signing whose key for `rank` is nobody's slot's."""
    return replace(SIGNING, keys={rank: Account.create().key})


def test_only_a_slots_holder_logs_in(host):
    """A stranger's key, or a holder's key for another rank's slot, gets no session: nothing it
    asks is done, and the holders' sessions go on."""
    honest = member(host, 1)
    honest.set("mine", b"kept")
    for rank, signing in [(1, stranger(1)), (2, replace(SIGNING, keys={2: SIGNING.keys[1]}))]:
        with pytest.raises(dist.DistNetworkError, match="not the holder of rank"):
            member(host, rank, signing).set("mine", b"x" * 2**20)
    assert honest.get("mine") == b"kept" and honest.num_keys() == 1
    assert host.used(2) == 0


def test_a_connection_that_does_not_log_in_is_closed():
    """A connection that says nothing is closed after the login time; a flood of them closes
    the oldest, so a holder still logs in."""
    with StoreHost("127.0.0.1", free_port(), SIGNING, CONTROL_BYTES, login_s=1.0) as host:
        flood = [socket.create_connection(host.address) for _ in range(MAX_PENDING + 8)]
        member(host, 0).set("k", b"v")
        for connection in flood:
            connection.settimeout(5)
            assert len(connection.recv(NONCE_BYTES)) == NONCE_BYTES
            assert connection.recv(1) == b""  # closed: the flood's oldest at once, the rest later
            connection.close()
        assert member(host, 1).get("k") == b"v"


def test_a_frame_past_the_limit_closes_the_members_connection(host):
    """A member that announces a frame larger than any request gets its connection closed
    before the host reads it, and its other sessions and the others' go on."""
    attacker = member(host, 2)
    attacker.set("k", b"v")
    assert attacker._socket is not None
    attacker._socket.sendall(struct.pack(">I", 2**31))
    assert attacker._socket.recv(1) == b""
    assert member(host, 2).get("k") == b"v"


def test_a_malformed_request_ends_only_its_senders_session(host, caplog):
    """Requests no client of ours sends (a count that is no number, an operation that does not
    exist, a key that is not text) close the sender's session and upset nothing else; adding to
    a value that is no count is refused."""
    for op, fields in [(b"A", ("n", "--5")), (b"Z", ("k",)), (b"S", (b"\xff", b"v"))]:
        with pytest.raises(dist.DistNetworkError):
            member(host, 2)._call(op, *fields)
    attacker = member(host, 2)
    attacker.set("n", b"not a count")
    with pytest.raises(StoreRefused, match="not a count"):
        attacker.add("n", 1)
    assert member(host, 1).add("m", 2) == 2
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def test_a_member_past_its_budget_loses_only_its_own_oldest_keys(host):
    """What a member writes past its budget pushes out its own oldest keys, never another's; a
    value larger than the whole budget is refused."""
    other, filler = member(host, 0), member(host, 1)
    other.set("rounds/0/0", b"a" * 100_000)
    value = b"x" * 100_000
    for index in range(40):  # four budgets' worth
        filler.set(f"rounds/{index}/1", value)
    assert host.used(1) <= CONTROL_BYTES < 40 * len(value)
    kept = [index for index in range(40) if filler.check([f"rounds/{index}/1"])]
    assert kept == list(range(40 - len(kept), 40))  # the newest
    assert len(kept) == CONTROL_BYTES // (len(value) + len("rounds/39/1") + KEY_COST)
    assert other.get("rounds/0/0") == b"a" * 100_000
    with pytest.raises(StoreRefused, match="over rank 1's budget"):
        filler.set("big", b"x" * CONTROL_BYTES)
    filler.set("rounds/0/0", b"mine now")  # an overwrite moves the key to its new writer
    assert host.used(0) == 0


def test_a_member_cannot_overwrite_anothers_post_or_a_rounds_members():
    """On the board's rules, a round's post and its parts are its rank's alone, its members are
    written once, and only the host takes keys off: a member that tries any of it is refused, and
    every rank still reads the honest post and members."""
    with StoreHost("127.0.0.1", free_port(), SIGNING, CONTROL_BYTES, rules=board_rule) as host:
        ranks = [member(host, rank) for rank in range(3)]
        boards = [RoundBoard(store, 3, 2, 0.0) for store in ranks]
        boards[0].post(5, 0, b"honest payload")
        boards[1].post(5, 1, b"another")
        assert boards[1].members(5) == [0, 1]
        attacker = ranks[2]
        for key in ["rounds/5/0", "rounds/5/0/0", "rounds/6/0/0", "rounds/5/members"]:
            with pytest.raises(StoreRefused):
                attacker.set(key, b"1")
        assert attacker.compare_set("rounds/5/members", "[0, 1]", "[0, 2]") == b"[0, 1]"
        with pytest.raises(StoreRefused, match="only the host"):
            attacker.delete_key("rounds/5/0/0")
        attacker.set("rounds/5/2", b"1")  # its own post's count, and keys the board never reads
        attacker.set("rounds/5/anything", b"x")
        assert boards[2].members(5) == [0, 1]
        assert boards[2].payloads(5, [0, 1], 100) == [b"honest payload", b"another"]
        boards[0].forget(5)  # the host's
        assert not ranks[1].check(["rounds/5/0"])


def test_a_slots_former_holder_is_cut_off(tmp_path, monkeypatch):
    """Once the host reads that a slot changed hands, its former holder's session ends and it
    cannot log in again; the new holder can."""
    monkeypatch.setattr(group_store, "HOLDERS_EVERY_S", 0.1)
    holders = tmp_path / "holders.json"
    holders.write_text(json.dumps({"holders": SIGNING.addresses, "open_through": 0}))
    signing = replace(SIGNING, holders_file=str(holders))
    successor = Account.create()
    with StoreHost("127.0.0.1", free_port(), signing, CONTROL_BYTES) as host:
        former = member(host, 1)
        former.set("k", b"v")
        successors = [*SIGNING.addresses[:1], successor.address, SIGNING.addresses[2]]
        holders.write_text(json.dumps({"holders": successors, "open_through": 0}))
        time.sleep(0.5)
        with pytest.raises(dist.DistNetworkError):
            former.get("k")
        with pytest.raises(dist.DistNetworkError, match="not the holder of rank 1"):
            member(host, 1).get("k")
        assert member(host, 1, replace(SIGNING, keys={1: successor.key})).get("k") == b"v"


def test_the_store_answers_as_torchs_stores_do(host):
    """Set, get, check, compare-set, add, delete and the key count, against torch's HashStore;
    a get waits for its key."""
    ours, torchs = member(host, 0), dist.HashStore()
    for store in (ours, torchs):
        store.set("a", "1")
        store.set("b", b"\x00\xff")
    steps = [
        lambda s: s.get("b"),
        lambda s: s.check(["a", "b"]),
        lambda s: s.check(["a", "c"]),
        lambda s: s.compare_set("c", "", "new"),
        lambda s: s.compare_set("d", "x", "new"),
        lambda s: s.check(["d"]),
        lambda s: s.compare_set("c", "other", "z"),
        lambda s: s.compare_set("c", "new", "z"),
        lambda s: s.add("n", 3),
        lambda s: s.add("n", -5),
        lambda s: s.delete_key("n"),
        lambda s: s.delete_key("n"),
        lambda s: s.num_keys(),
    ]
    assert [step(ours) for step in steps] == [step(torchs) for step in steps]
    threading.Timer(0.3, lambda: member(host, 1).set("late", b"here")).start()
    assert ours.get("late") == b"here"
    with pytest.raises(dist.DistStoreError):
        ours.wait(["never"], timedelta(seconds=0.2))


def test_a_store_listens_on_loopback_only_for_a_loopback_endpoint():
    """A devnet's store stays on loopback; a public endpoint's listens on every interface, since
    the address a provider registered may be its router's."""
    assert [listening_host(h) for h in ("127.0.0.1", "::1", "localhost")] == [
        "127.0.0.1",
        "::1",
        "localhost",
    ]
    assert listening_host("203.0.113.5") is None and listening_host("node.example") is None
