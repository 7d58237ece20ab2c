"""Queries over the indexed rows: what the routes show, folded from append-only event rows."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import Select, func, select, tuple_
from sqlalchemy.orm import Session

from marketplace.errors import ZooError
from marketplace.gateway import db
from marketplace.gateway.api import schemas
from marketplace.gateway.checkpoints import PassedOver, checkpoint_facts


class NotFound(ZooError, LookupError):
    """The asked-for job or provider is not in the index."""


class Forbidden(ZooError, PermissionError):
    """The signed-in wallet may not write there."""


class UnknownTransaction(ZooError, LookupError):
    """A transaction hash the chain has never seen."""


class TooLarge(ZooError, ValueError):
    """An upload over the gateway's size limit."""


def _status_rows() -> Select:
    """Each job's status: its newest status row (rows are inserted in chain order)."""
    newest = select(func.max(db.JobStatusChange.id)).group_by(db.JobStatusChange.job_id)
    return select(db.JobStatusChange.job_id, db.JobStatusChange.status).where(
        db.JobStatusChange.id.in_(newest)
    )


def _clearing_prices(session: Session, job_ids: list[int]) -> dict[int, int]:
    query = (
        select(db.Auction.job_id, db.Auction.clearing_price)
        .where(db.Auction.cleared, db.Auction.job_id.in_(job_ids))
        .order_by(db.Auction.id)
    )
    return dict(session.execute(query).all())


def _job_public(job: db.Job, status: str, price: int | None) -> dict[str, Any]:
    fields = {c: getattr(job, c) for c in schemas.JobPublic.model_fields if hasattr(job, c)}
    return fields | {"status": status, "clearing_price": price}


def list_jobs(
    session: Session,
    limit: int,
    offset: int,
    status: str | None = None,
    user: str | None = None,
    provider: str | None = None,
) -> list[dict[str, Any]]:
    statuses = _status_rows().subquery()
    query = select(db.Job, statuses.c.status).join(statuses, statuses.c.job_id == db.Job.job_id)
    if status is not None:
        query = query.where(statuses.c.status == status)
    if user is not None:
        query = query.where(db.Job.user == user)
    if provider is not None:
        query = query.where(
            db.Job.job_id.in_(select(db.Slot.job_id).where(db.Slot.provider == provider))
        )
    rows = session.execute(query.order_by(db.Job.job_id.desc()).limit(limit).offset(offset)).all()
    prices = _clearing_prices(session, [job.job_id for job, _ in rows])
    return [_job_public(job, st, prices.get(job.job_id)) for job, st in rows]


def get_job(session: Session, job_id: int) -> dict[str, Any]:
    job = session.scalar(select(db.Job).where(db.Job.job_id == job_id))
    if job is None:
        raise NotFound(f"job {job_id} is not indexed")
    status = session.execute(_status_rows().where(db.JobStatusChange.job_id == job_id)).one().status

    def by_job(table):
        return list(session.scalars(select(table).where(table.job_id == job_id).order_by(table.id)))

    settlements = by_job(db.Settlement)
    return _job_public(job, status, _clearing_prices(session, [job_id]).get(job_id)) | {
        "bids": by_job(db.Bid),
        "slots": by_job(db.Slot),
        "settlement": settlements[-1] if settlements else None,
    }


def job_units(session: Session, job_id: int, limit: int, offset: int) -> list[dict[str, Any]]:
    """A page of the job's units in commit order, each with its verification results."""
    get_job(session, job_id)
    units = session.scalars(
        select(db.Unit)
        .where(db.Unit.job_id == job_id)
        .order_by(db.Unit.id)
        .limit(limit)
        .offset(offset)
    ).all()
    results: dict[tuple[int, int], list[db.Result]] = {}
    if units:
        keys = {(u.slot, u.index) for u in units}
        for r in session.scalars(
            select(db.Result)
            .where(db.Result.job_id == job_id, tuple_(db.Result.slot, db.Result.index).in_(keys))
            .order_by(db.Result.id)
        ):
            results.setdefault((r.slot, r.index), []).append(r)
    fields = [c for c in schemas.UnitPublic.model_fields if c not in ("results", "void")]
    rollbacks = _rollbacks(session, job_id)
    return [
        {c: getattr(u, c) for c in fields}
        | {"results": results.get((u.slot, u.index), []), "void": _void(u, rollbacks)}
        for u in units
    ]


def list_settlements(session: Session, limit: int, offset: int) -> list[db.Settlement]:
    query = select(db.Settlement).order_by(db.Settlement.id.desc()).limit(limit).offset(offset)
    return list(session.scalars(query))


def _stake(session: Session, address: str) -> dict[str, int]:
    """Replay the account's stake moves in chain order, as Staking applies them."""
    staked = locked = unbonding = 0
    query = (
        select(db.StakeChange).where(db.StakeChange.account == address).order_by(db.StakeChange.id)
    )
    for change in session.scalars(query):
        amount = change.amount
        if change.kind == "staked":
            staked += amount
        elif change.kind == "unstake":
            staked, unbonding = staked - amount, unbonding + amount
        elif change.kind == "withdrawn":
            unbonding -= amount
        elif change.kind == "slashed":
            from_stake = min(amount, staked)
            staked, unbonding = staked - from_stake, unbonding - (amount - from_stake)
            locked = min(locked, staked)
        elif change.kind == "locked":
            locked += amount
        elif change.kind == "unlocked":
            locked -= amount
    return {"staked": staked, "locked": locked, "unbonding": unbonding}


def _provider_public(session: Session, row: db.Provider) -> dict[str, Any]:
    fields = {
        c: getattr(row, c)
        for c in ("address", "tier", "gpu_model", "gpus", "endpoint", "block_number", "tx_hash")
    }
    return fields | _stake(session, row.address)


def _registrations() -> Select:
    newest = select(func.max(db.Provider.id)).group_by(db.Provider.address)
    return select(db.Provider).where(db.Provider.id.in_(newest))


def list_providers(
    session: Session, limit: int, offset: int, tier: int | None = None
) -> list[dict[str, Any]]:
    query = _registrations()
    if tier is not None:
        query = query.where(db.Provider.tier == tier)
    rows = session.scalars(query.order_by(db.Provider.id).limit(limit).offset(offset))
    return [_provider_public(session, row) for row in rows]


def get_provider(session: Session, address: str) -> dict[str, Any]:
    row = session.scalar(_registrations().where(db.Provider.address == address))
    if row is None:
        raise NotFound(f"provider {address} is not registered")
    jobs = session.scalars(select(db.Slot.job_id).where(db.Slot.provider == address).distinct())
    slashes = session.scalars(
        select(db.Slash).where(db.Slash.account == address).order_by(db.Slash.id)
    )
    return _provider_public(session, row) | {"jobs": sorted(jobs), "slashes": list(slashes)}


def indexed_block(session: Session) -> int | None:
    state = session.get(db.IndexerState, 1)
    return None if state is None or state.last_block_hash is None else state.next_block - 1


def network_stats(session: Session) -> dict[str, Any]:
    def total(column) -> int:
        """Summed in Python: SQL would sum the decimal text as floats and lose wei."""
        return sum(session.scalars(select(column)), 0)

    statuses = Counter(status for _, status in session.execute(_status_rows()))
    settled = select(db.Settlement).where(~db.Settlement.cancelled)
    return {
        "indexed_block": indexed_block(session),
        "jobs": dict(statuses),
        "providers": session.scalar(select(func.count(func.distinct(db.Provider.address)))),
        "escrowed": total(db.Job.budget),
        "paid": sum(s.payment for s in session.scalars(settled)),
        "fees": sum(s.fee for s in session.scalars(settled)),
        "refunded": total(db.Settlement.refund),
        "slashed": total(db.Slash.amount),
        "treasury_balance": treasury(session, None)["balance"],
    }


# --- logs, metrics, result ---------------------------------------------------------------------

METRIC_FIELDS = [f for f in schemas.UnitMetrics.model_fields if f not in ("slot", "index", "cid")]
FETCHES_PER_REQUEST = 8  # checkpoints a metrics request reads from IPFS at most
WHOLE_METRICS = {
    name
    for name, field in schemas.UnitMetrics.model_fields.items()
    if name in METRIC_FIELDS and field.annotation == int | None
}


def _metric(value: object, name: str) -> int | float | None:
    """A figure as the schema shows it: a count only when whole."""
    if name in WHOLE_METRICS:
        return value if isinstance(value, int) else None
    return value if isinstance(value, int | float) else None


def job_logs(session: Session, job_id: int, since: int, limit: int) -> list[db.JobLog]:
    get_job(session, job_id)
    query = (
        select(db.JobLog)
        .where(db.JobLog.job_id == job_id, db.JobLog.id > since)
        .order_by(db.JobLog.id)
        .limit(limit)
    )
    return list(session.scalars(query))


def post_logs(
    session: Session, job_id: int, author: str, lines: list[str], now: int
) -> dict[str, int]:
    """Append lines to the job's log; only the job's user and the providers that held its slots
    may."""
    job = get_job(session, job_id)
    writers = {job["user"], *(slot.provider for slot in job["slots"])}
    if author not in writers:
        raise Forbidden(f"{author} is neither the user nor a provider of job {job_id}")
    rows = [db.JobLog(job_id=job_id, author=author, posted_at=now, line=line) for line in lines]
    session.add_all(rows)
    session.commit()
    return {"count": len(rows), "last_id": rows[-1].id}


def _live_units(session: Session, job_id: int) -> list[db.Unit]:
    """The newest commit of each (slot, index) that no later rollback voided: a unit rejected on
    review voids itself and every later unit of its slot until each is committed again."""
    newest = (
        select(func.max(db.Unit.id))
        .where(db.Unit.job_id == job_id)
        .group_by(db.Unit.slot, db.Unit.index)
    )
    units = session.scalars(
        select(db.Unit).where(db.Unit.id.in_(newest)).order_by(db.Unit.slot, db.Unit.index)
    )
    rollbacks = _rollbacks(session, job_id)
    return [unit for unit in units if not _void(unit, rollbacks)]


def _rollbacks(session: Session, job_id: int) -> list[db.Rollback]:
    return list(session.scalars(select(db.Rollback).where(db.Rollback.job_id == job_id)))


def _void(unit: db.Unit, rollbacks: list[db.Rollback]) -> bool:
    """Whether a later rollback of the unit's slot, at its index or before, voided it."""
    return any(
        r.slot == unit.slot
        and r.index <= unit.index
        and (r.block_number, r.log_index) > (unit.block_number, unit.log_index)
        for r in rollbacks
    )


def job_metrics(session: Session, storage, job_id: int, passed_over: PassedOver) -> dict[str, Any]:
    job = get_job(session, job_id)
    units = _live_units(session, job_id)
    # The job's units may name thousands of checkpoints nobody read yet: a request reads a few
    # (none that failed lately), and the rest show their figures once later requests read them.
    cids = {unit.cid for unit in units}
    known = {
        f.cid: f
        for f in session.scalars(select(db.CheckpointFacts).where(db.CheckpointFacts.cid.in_(cids)))
    }
    unread = sorted(cid for cid in cids - known.keys() if cid not in passed_over)
    for cid in unread[:FETCHES_PER_REQUEST]:
        facts = checkpoint_facts(session, storage, cid, passed_over)
        if facts is not None:
            known[cid] = facts
    shown = []
    for unit in units:
        metrics = known[unit.cid].metrics if unit.cid in known else {}
        shown.append(
            {"slot": unit.slot, "index": unit.index, "cid": unit.cid}
            | {k: _metric(metrics.get(k), k) for k in METRIC_FIELDS}
        )
    first_slot = [u for u in shown if u["slot"] == 0]
    return {
        "status": job["status"],
        "units_done": len(units),
        "units_total": job["nodes"] * job["units_per_node"],
        "accrued": sum(u.amount for u in units),
        "loss": first_slot[-1]["loss"] if first_slot else None,
        "units": shown,
    }


def job_result(session: Session, storage, job_id: int, passed_over: PassedOver) -> dict[str, Any]:
    job = get_job(session, job_id)
    live = _live_units(session, job_id)
    last = [
        max((u for u in live if u.slot == slot), key=lambda u: u.index, default=None)
        for slot in range(job["nodes"])
    ]
    unit = last[0]
    if unit is None:
        raise NotFound(f"job {job_id} has no committed checkpoint yet")
    facts = checkpoint_facts(session, storage, unit.cid, passed_over)
    results = session.scalars(
        select(db.Result)
        .where(db.Result.job_id == job_id, db.Result.slot == 0, db.Result.index == unit.index)
        .order_by(db.Result.id)
    )
    return {
        "job_id": job_id,
        "status": job["status"],
        "final": job["status"] in ("completed", "settled"),
        "slot": unit.slot,
        "index": unit.index,
        "cid": unit.cid,
        "state_hash": unit.state_hash,
        "block_number": unit.block_number,
        "tx_hash": unit.tx_hash,
        "state_verified": None if facts is None else facts.state_hash == unit.state_hash,
        "results": list(results),
        "nodes": job["nodes"],
        "units_per_node": job["units_per_node"],
        "slots": [
            {"slot": u.slot, "index": u.index, "cid": u.cid, "state_hash": u.state_hash}
            for u in last
            if u is not None
        ],
    }


# --- treasury ----------------------------------------------------------------------------------


def treasury(session: Session, deployment) -> dict[str, Any]:
    """Income by source and grants, from the indexed ZEN transfers in and out of the treasury."""
    totals = Counter()
    sources = (
        {}
        if deployment is None
        else {
            deployment.addresses["JobMarket"]: "fee_income",
            deployment.addresses["Staking"]: "slash_income",
        }
    )
    for transfer in session.scalars(select(db.TreasuryTransfer)):
        kind = sources.get(transfer.counterparty, "other_income") if transfer.incoming else "grants"
        totals[kind] += transfer.amount
    income = totals["fee_income"] + totals["slash_income"] + totals["other_income"]
    return {
        "address": None if deployment is None else deployment.addresses["Treasury"],
        "balance": income - totals["grants"],
        **{k: totals[k] for k in ("fee_income", "slash_income", "other_income", "grants")},
    }


def treasury_transfers(session: Session, limit: int, offset: int) -> list[db.TreasuryTransfer]:
    query = (
        select(db.TreasuryTransfer)
        .order_by(db.TreasuryTransfer.id.desc())
        .limit(limit)
        .offset(offset)
    )
    return list(session.scalars(query))


def indexed_chain_id(session: Session) -> int | None:
    state = session.get(db.IndexerState, 1)
    return None if state is None else state.chain_id


# --- the model and dataset registry ------------------------------------------------------------


def _version_public(row: db.RegistryVersion) -> dict[str, Any]:
    fields = {
        c: getattr(row, c) for c in schemas.RegistryVersionPublic.model_fields if hasattr(row, c)
    }
    parent = f"{row.parent_name}@{row.parent_version}" if row.parent_name else None
    return fields | {"parent": parent}


def _name_public(session: Session, kind: str, versions: list[db.RegistryVersion]) -> dict[str, Any]:
    """A name from its versions, oldest first: its first publisher owns it unless it was handed
    on since."""
    name = versions[0].name
    moved = session.scalar(
        select(db.RegistryTransfer.new_owner)
        .where(db.RegistryTransfer.kind == kind, db.RegistryTransfer.name == name)
        .order_by(db.RegistryTransfer.id.desc())
        .limit(1)
    )
    return {
        "kind": kind,
        "name": name,
        "owner": moved or versions[0].publisher,
        "versions": len(versions),
        "latest": _version_public(versions[-1]),
    }


def list_registry(session: Session, kind: str, limit: int, offset: int) -> list[dict[str, Any]]:
    """Names of `kind` in the order they were first published, each with its newest version."""
    first = (
        select(db.RegistryVersion.name)
        .where(db.RegistryVersion.kind == kind, db.RegistryVersion.version == 1)
        .order_by(db.RegistryVersion.id)
        .limit(limit)
        .offset(offset)
    )
    names = list(session.scalars(first))
    rows = session.scalars(
        select(db.RegistryVersion)
        .where(db.RegistryVersion.kind == kind, db.RegistryVersion.name.in_(names))
        .order_by(db.RegistryVersion.id)
    )
    by_name: dict[str, list[db.RegistryVersion]] = {name: [] for name in names}
    for row in rows:
        by_name[row.name].append(row)
    return [_name_public(session, kind, versions) for versions in by_name.values() if versions]


def get_registry_name(session: Session, kind: str, name: str) -> dict[str, Any]:
    versions = list(
        session.scalars(
            select(db.RegistryVersion)
            .where(db.RegistryVersion.kind == kind, db.RegistryVersion.name == name)
            .order_by(db.RegistryVersion.id)
        )
    )
    if not versions:
        raise NotFound(f"{kind} {name} has no published version")
    return _name_public(session, kind, versions) | {
        "history": [_version_public(v) for v in versions]
    }
