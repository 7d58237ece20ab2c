"""The verifier daemon on real parts: Anvil, an IPFS node, Redis, a Celery worker, the engine."""

from __future__ import annotations

import json
import time

import pytest

from marketplace.chain.anvil import advance_time, mine
from marketplace.chain.deploy import ZEN
from marketplace.chain.ledger import Hardware
from marketplace.devnet.accounts import devnet_account
from marketplace.ipfs.cid import CID
from marketplace.protocol.round_signatures import Tenure
from marketplace.protocol.terms import SlashReason, Tier, Verdict
from node.benchmark import run_benchmark
from verifier import daemon as daemon_module
from verifier import journal as j

pytestmark = [pytest.mark.anvil, pytest.mark.slow, pytest.mark.usefixtures("worker")]

ALWAYS = 10_000  # sample rate: every unit is sampled
ZERO_ADDRESS = "0x" + "00" * 20


def results(ledger, job_id):
    """The results posted for a job's units, by unit: the Celery worker posts in any order."""
    return sorted(
        (
            e["args"]
            for e in ledger.verification.events.ResultPosted().get_logs(
                from_block=0, argument_filters={"jobId": job_id}
            )
        ),
        key=lambda result: (result["slot"], result["index"]),
    )


def settled(daemon, kind, count):
    """True once `count` pieces of work of `kind` reached a final state in the daemon's journal."""
    final = (j.POSTED, j.SKIPPED, j.DROPPED)
    return lambda: (
        sum(1 for (k, *_), s in daemon.journal.states().items() if k == kind and s in final)
        >= count
    )


def test_honest_units_pass_with_evidence_of_the_recomputed_hash(
    job, make_daemon, drive, cast, storage, tmp_path
):
    provider = job(ALWAYS, judges=(0,))  # the only staked verifier: drawn for every unit
    units = [provider.honest(i) for i in range(3)]
    daemon = make_daemon(cast.verifiers[0], tmp_path / "journal.sqlite3")

    drive([daemon], settled(daemon, j.RESULT, 3))

    posted = results(daemon.ledger, provider.job_id)
    assert [(r["index"], r["pass"], r["verifier"]) for r in posted] == [
        (i, True, cast.verifiers[0].address) for i in range(3)
    ]
    for unit, result in zip(units, posted, strict=True):
        evidence = json.loads(storage.cat(result["evidenceCid"]))
        assert (
            evidence["recomputed_state_hash"]
            == evidence["committed_state_hash"]
            == unit.state_hash.hex()
        )
        assert (evidence["job"], evidence["index"], evidence["pass"]) == (
            provider.job_id,
            unit.index,
            True,
        )
        assert evidence["environment"]["deterministic"] is True
        assert (
            daemon.ledger.verification_result(unit.job_id, unit.slot, unit.index)["verdict"]
            == Verdict.PASSED
        )
        # The seed that sampled it is on-chain for good, past the EVM's 256 blocks.
        assert daemon.ledger.recorded_seed(unit.block_number) == bytes(
            daemon.ledger.w3.eth.get_block(unit.block_number + 1)["hash"]
        )

    # A restart on the same journal resumes where it stopped: nothing is queued or posted again.
    restarted = make_daemon(cast.verifiers[0], tmp_path / "journal.sqlite3")
    assert restarted.cursor.next_block == daemon.cursor.next_block
    for _ in range(3):
        restarted.tick()
    assert len(results(daemon.ledger, provider.job_id)) == 3


def test_faked_unit_fails_and_a_second_verifier_confirms_the_slash(job, make_daemon, drive, cast):
    provider = job(ALWAYS)
    provider.honest(0)
    # A lazy provider: skips unit 1's training and commits its unit-0 checkpoint again.
    faked = provider.commit(provider.checkpoint)
    first, second = make_daemon(cast.verifiers[0]), make_daemon(cast.verifiers[1])
    ledger = first.ledger
    confirmed = ledger.verification.events.DisputeResolved()

    drive([first, second], lambda: bool(confirmed.get_logs(from_block=0)))

    posted = {r["index"]: r for r in results(ledger, provider.job_id)}
    assert posted[0]["pass"] is True and posted[1]["pass"] is False
    (resolution,) = [e["args"] for e in confirmed.get_logs(from_block=0)]
    assert resolution["confirmed"] is True and resolution["index"] == 1
    assert resolution["resolver"] != posted[1]["verifier"]
    assert ledger.verification_result(provider.job_id, 0, 1)["verdict"] == Verdict.REJECTED

    slashes = ledger.staking.events.Slashed().get_logs(
        from_block=0, argument_filters={"account": provider.account.address}
    )
    assert [s["args"]["reason"] for s in slashes] == [SlashReason.INCORRECT_COMPUTATION]
    assert slashes[0]["args"]["reporter"] == posted[1]["verifier"]
    # The slot is rolled back to the last good unit and re-auctioned.
    slot = ledger.slot(provider.job_id, 0)
    assert (slot["provider"], slot["unitsDone"]) == (ZERO_ADDRESS, 1)
    assert not any(ledger.market.functions.unitHash(provider.job_id, 0, faked.index).call())
    rounds = ledger.market.events.AuctionOpened().get_logs(
        from_block=0, argument_filters={"jobId": provider.job_id}
    )
    assert rounds[-1]["args"]["round"] > rounds[0]["args"]["round"]
    # Both daemons saw the rejection: the slot's next holder could sign from unit 0 (the slot
    # goes on from unit 0's end), not from unit 1, as two commitments alone would say. And
    # the removal: the cheater's signatures stand through unit 3, two past the last unit
    # committed before it left, not to the job's end.
    head = ledger.w3.eth.block_number
    cheater = {provider.account.address.lower(): Tenure(0, 3)}
    assert ledger.slot_tenures(provider.job_id, 1) == [cheater]
    for daemon in (first, second):
        daemon.tick()
        daemon.journal.hold_slot(provider.job_id, 0, cast.verifiers[0].address, head + 1)
        tenures = daemon.journal.slot_tenures(provider.job_id, 0, head + 1)
        assert tenures == cheater | {cast.verifiers[0].address.lower(): Tenure(0)}


def test_a_checkpoint_its_provider_does_not_serve_fails_its_unit_and_the_next(
    job, make_daemon, drive, cast, storage
):
    """A provider trains unit 0 but keeps its checkpoint to itself, committing only its CID and
    true state hash, then trains unit 1 on it and serves that one. Once the verifier has asked
    for the checkpoint for its patience, unit 0 fails as withheld, and so does unit 1, which
    nobody can re-run: the same provider committed both."""
    provider = job(ALWAYS, judges=(0,))
    provider.commit(provider.train(0), withheld=True)
    provider.honest(1)
    daemon = make_daemon(cast.verifiers[0])
    daemon.withheld_patience = 3

    drive([daemon], settled(daemon, j.RESULT, 2))

    posted = {r["index"]: r for r in results(daemon.ledger, provider.job_id)}
    assert [posted[i]["pass"] for i in (0, 1)] == [False, False]
    reasons = [json.loads(storage.cat(posted[i]["evidenceCid"]))["reason"] for i in (0, 1)]
    assert reasons[0].startswith("withheld: committed checkpoint")
    assert reasons[1].startswith("withheld: previous checkpoint")
    assert daemon.ledger.open_disputes(provider.job_id) == 2


def test_a_verifier_judges_only_the_units_it_is_drawn_for(job, make_daemon, cast):
    """Two verifiers are staked and one daemon runs: it re-runs only the units it is drawn to
    judge in a turn of their window (once that turn is running or next), skips the others, and
    posts each verdict within a turn it is drawn for."""
    provider = job(ALWAYS)
    units = [provider.honest(i) for i in range(3)]
    daemon = make_daemon(cast.verifiers[0])
    ledger, me = daemon.ledger, cast.verifiers[0].address
    mine(ledger.w3, 2)
    drawn = {u.index: ledger.result_turns(u, me, u.committed_at) for u in units}
    length = ledger.verification.functions.turnLength(False).call()

    deadline = time.monotonic() + 120
    while not settled(daemon, j.RESULT, len(units))():
        assert time.monotonic() < deadline, "the verifier did not finish in time"
        daemon.tick()
        if not daemon.journal.work(j.QUEUED):  # re-runs in hand: let the next turn come
            advance_time(ledger.w3, length)
        mine(ledger.w3)
        time.sleep(0.1)

    events = ledger.verification.events.ResultPosted().get_logs(
        from_block=0, argument_filters={"jobId": provider.job_id}
    )
    posted = {e["args"]["index"]: e for e in events}
    states = daemon.journal.states()
    for unit in units:
        turns = drawn[unit.index]
        if not turns:
            assert states[(j.RESULT, unit.job_id, 0, unit.index)] == j.SKIPPED
            assert unit.index not in posted
            continue
        assert states[(j.RESULT, unit.job_id, 0, unit.index)] == j.POSTED
        assert posted[unit.index]["args"]["verifier"] == me
        at = ledger.w3.eth.get_block(posted[unit.index]["blockNumber"])["timestamp"]
        assert any(start <= at < start + length for start in turns)


def register(ledger, cast, storage, account, document: bytes) -> None:
    """Register `account` as a provider whose attestation names `document`, pinned here."""
    ledger.w3.provider.make_request("anvil_setBalance", [account.address, hex(10**18)])
    ledger.transfer(cast.governor, account.address, 5_000 * 10**18)
    digest = CID.parse(storage.add_bytes(document)).multihash[2:]
    ledger.register_provider(
        account, Tier.COMMUNITY, Hardware("cpu", 0, 0, 1, "http://127.0.0.1/p", digest)
    )


def staked_verifier(ledger, cast, make_daemon):
    ledger.transfer(cast.governor, cast.verifiers[0].address, 5_000 * 10**18)
    ledger.register_verifier(cast.verifiers[0], "http://127.0.0.1/v")
    ledger.stake(cast.verifiers[0], 2_000 * 10**18)
    return make_daemon(cast.verifiers[0])


def test_benchmark_admission_attests_only_a_valid_report(ledger, cast, storage, make_daemon):
    report = run_benchmark("cpu")
    forged = report.model_copy(update={"checksum": "00" * 32})
    honest, forger = devnet_account(7), devnet_account(8)
    register(ledger, cast, storage, honest, report.to_bytes())
    register(ledger, cast, storage, forger, forged.to_bytes())
    daemon = staked_verifier(ledger, cast, make_daemon)

    daemon.tick()

    assert ledger.staking_account(honest.address)["admitted"] is True
    assert ledger.staking_account(forger.address)["admitted"] is False
    (attested,) = ledger.staking.events.BenchmarkAttested().get_logs(from_block=0)
    assert attested["args"]["provider"] == honest.address
    assert attested["args"]["score"] == int(report.gflops)
    assert daemon.journal.admissions(j.REJECTED) == [
        (forger.address, CID.parse(storage.add_bytes(forged.to_bytes())).multihash[2:])
    ]


def test_malformed_benchmark_reports_are_rejected_and_the_daemon_goes_on(
    ledger, cast, storage, make_daemon, caplog
):
    """Registrations are free to send: reports of the wrong types, an overflowing score, a
    huge document, not JSON at all. Each is rejected with a log line; an honest provider who
    registers after them is admitted by the same daemon, in the same tick."""
    good = json.loads(run_benchmark("cpu").to_bytes())
    attacks = [
        json.dumps(good | {"gflops": "x"}).encode(),
        json.dumps(good).replace(str(good["gflops"]), "1e400").encode(),
        json.dumps(good | {"gflops": 1e300}).encode(),
        json.dumps(good | {"size": [512]}).encode(),
        json.dumps(good | {"device": "x" * 100_000}).encode(),
        b"\xff\xfe not json",
        b"[]",
    ]
    for i, document in enumerate(attacks):
        register(ledger, cast, storage, devnet_account(10 + i), document)
    honest = devnet_account(9)
    register(ledger, cast, storage, honest, run_benchmark("cpu").to_bytes())
    daemon = staked_verifier(ledger, cast, make_daemon)

    daemon.tick()

    assert ledger.staking_account(honest.address)["admitted"] is True
    rejected = {provider for provider, _ in daemon.journal.admissions(j.REJECTED)}
    assert rejected == {devnet_account(10 + i).address for i in range(len(attacks))}
    assert not any(
        ledger.staking_account(devnet_account(10 + i).address)["admitted"]
        for i in range(len(attacks))
    )
    assert daemon.journal.quarantined() == []  # rejected as reports, not as broken events
    assert caplog.text.count("not admitted: not a benchmark report") == len(attacks)


def test_a_report_nobody_serves_is_tried_a_bounded_number_of_times(
    ledger, cast, storage, make_daemon, monkeypatch
):
    absent = devnet_account(7)
    ledger.transfer(cast.governor, absent.address, 5_000 * 10**18)
    ledger.register_provider(
        absent, Tier.COMMUNITY, Hardware("cpu", 0, 0, 1, "http://127.0.0.1/p", bytes(range(32)))
    )
    daemon = staked_verifier(ledger, cast, make_daemon)
    monkeypatch.setattr(daemon_module, "ADMISSION_BACKOFF", 0.0)  # every try is due at once

    ticks = 0
    while daemon.journal.admissions(j.PENDING) or not ticks:
        daemon.tick()
        ticks += 1
        assert ticks <= daemon_module.ADMISSION_FETCHES
    [(provider, _)] = daemon.journal.admissions(j.REJECTED)
    assert provider == absent.address
    assert ledger.staking_account(absent.address)["admitted"] is False


def test_a_slots_holder_is_known_from_its_assignment_before_it_commits(job, make_daemon, cast):
    """What a holder signs for its group stands in its peers' records even if it drops out
    before committing anything: the daemon keeps every assignment."""
    provider = job(ALWAYS)
    daemon = make_daemon(cast.verifiers[0])
    daemon.tick()
    head = daemon.ledger.w3.eth.block_number
    assert daemon.journal.slot_tenures(provider.job_id, 0, head) == {
        provider.account.address.lower(): Tenure(0)
    }


def test_overdue_slot_is_reported(job, make_daemon, cast):
    provider = job(ALWAYS)
    provider.honest(0)
    daemon = make_daemon(cast.verifiers[0])
    daemon.tick()
    advance_time(daemon.ledger.w3, 3_601)

    daemon.report_downtime()

    (removed,) = daemon.ledger.market.events.ProviderRemoved().get_logs(from_block=0)
    assert removed["args"]["reason"] == SlashReason.DOWNTIME
    (slash,) = daemon.ledger.staking.events.Slashed().get_logs(from_block=0)
    assert slash["args"]["reporter"] == cast.verifiers[0].address


def test_a_groups_slots_are_not_reported_while_its_host_waits_for_a_successor(
    job, make_daemon, cast
):
    """Slot 0's provider hosts the group, and its board goes with it: of a group whose slots are
    all late, the host is reported and the other slot, which could not train since, is not,
    until the host's successor has been there a whole checkpoint interval."""
    provider = job(ALWAYS, nodes=2)
    ledger = provider.ledger
    rank = ledger.slot(provider.job_id, 1)["provider"]
    daemon = make_daemon(cast.verifiers[0])
    daemon.tick()
    advance_time(ledger.w3, 3_601)
    daemon.report_downtime()
    daemon.report_downtime()
    removed = ledger.market.events.ProviderRemoved().get_logs(from_block=0)
    assert [event["args"]["slot"] for event in removed] == [0]
    assert ledger.slot(provider.job_id, 1)["provider"] == rank

    market = ledger.market.functions
    successor = cast.providers[2]
    bid = ledger.commit_bid(successor, provider.job_id, 60 * ZEN)
    advance_time(ledger.w3, market.bidWindow().call() + 1)
    ledger.reveal_bid(successor, bid)
    advance_time(ledger.w3, market.revealWindow().call() + 1)
    ledger.close_auction(cast.governor, provider.job_id)
    arrived = ledger.w3.eth.get_block("latest")["timestamp"]
    assert ledger.checkpoint_deadline(provider.job_id, 1) == arrived + 3_600
    daemon.report_downtime()
    assert len(ledger.market.events.ProviderRemoved().get_logs(from_block=0)) == 1

    # the successor hosts and trains; the rank stays silent a whole interval from its arrival
    advance_time(ledger.w3, 3_601)
    cid = provider.storage.add_bytes(b"the successor's unit")
    ledger.commit_checkpoint(successor, provider.job_id, 0, cid, bytes(32))
    daemon.report_downtime()
    removed = ledger.market.events.ProviderRemoved().get_logs(from_block=0)
    assert [(e["args"]["slot"], e["args"]["provider"]) for e in removed][1:] == [(1, rank)]


def test_unit_past_its_verification_window_is_not_rerun(job, make_daemon, cast):
    provider = job(ALWAYS)
    unit = provider.honest(0)
    daemon = make_daemon(cast.verifiers[0])
    ledger = daemon.ledger
    advance_time(ledger.w3, ledger.verification.functions.verificationWindow().call())

    daemon.tick()

    assert daemon.journal.states() == {(j.RESULT, unit.job_id, 0, 0): j.DROPPED}
    assert results(ledger, unit.job_id) == []


def test_a_drawn_verifier_that_unstaked_re_runs_nothing_until_it_is_active(job, make_daemon, cast):
    """Drawn on its stake at the unit's seed, a verifier that has since unstaked below the
    minimum would re-run the unit for a verdict the ledger refuses: it queues nothing, and takes
    the unit up again once it is staked back."""
    provider = job(ALWAYS, judges=(0,))  # the only staked verifier: drawn for every turn
    unit = provider.honest(0)
    verifier = cast.verifiers[0]
    daemon = make_daemon(verifier)
    ledger = daemon.ledger
    staked = ledger.staking_account(verifier.address)["staked"]
    ledger.send(ledger.request_unstake_call(staked), verifier)
    mine(ledger.w3, 2)
    assert ledger.result_turns(unit, verifier.address, unit.committed_at)  # still drawn

    for _ in range(3):
        daemon.tick()
    assert daemon.journal.work(j.QUEUED) == []
    assert daemon.journal.states() == {(j.RESULT, unit.job_id, 0, 0): j.NEW}

    ledger.transfer(cast.governor, verifier.address, staked)
    ledger.stake(verifier, staked)
    daemon.tick()
    assert [w.unit.index for w in daemon.journal.work(j.QUEUED)] == [0]
