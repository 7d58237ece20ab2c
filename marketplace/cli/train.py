"""`zoo-compute train`: escrow a budget, auction the job, follow the training, settle, get the weights."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from marketplace import jobs
from marketplace.chain.deploy import ZEN
from marketplace.chain.zen import rounded
from marketplace.cli.wallet import ZEN_AMOUNT, open_ledger
from marketplace.config import Settings
from marketplace.protocol.spec import SpecError
from marketplace.protocol.terms import JobStatus, Tier
from marketplace.sdk import Client, Job
from marketplace.storage import Storage
from marketplace.wallet import load_account

console = Console()


def zen(wei: int) -> str:
    return f"{rounded(wei)} ZEN"


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Job spec (YAML; see node/specs/README.md).")
@click.option("--max-budget", required=True, type=ZEN_AMOUNT,
              help="Most ZEN to spend; escrowed, the unspent part refunded.")
@click.option("--max-price", default="100", show_default=True, type=ZEN_AMOUNT,
              help="Most ZEN per GPU-hour to pay a provider.")
@click.option("--tier", type=click.Choice(Tier.labels()), default="community", show_default=True,
              help="Provider tier to buy from.")
@click.option("--nodes", type=click.IntRange(1, 64), help="Providers to train on [default: the spec's].")
@click.option("--sample-rate", default=1_000, show_default=True, type=click.IntRange(0, 10_000),
              help="Share of work units verifiers re-run, in basis points.")
@click.option("--checkpoint-interval", default=600, show_default=True, type=click.IntRange(1),
              help="Seconds a provider may go without a checkpoint before it can be reported.")
@click.option("--auction-timeout", default=120, show_default=True, type=click.IntRange(1),
              help="Seconds to wait for the auction to fill before cancelling for a full refund.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the trained weights [default: weights/job-<id>.pt].")
@click.option("--no-wait", is_flag=True, help="Print the job id once escrowed and return.")
def train(config_path: Path, max_budget: int, max_price: int, tier: str, nodes: int | None, sample_rate: int,
          checkpoint_interval: int, auction_timeout: int, output: Path | None, no_wait: bool) -> None:
    """Train a model on the market: escrow, auction, training, settlement, weights back by CID."""
    order = jobs.Order(
        max_budget=max_budget, max_price=max_price, tier=Tier.named(tier),
        nodes=nodes, sample_rate_bps=sample_rate, checkpoint_interval=checkpoint_interval,
    )
    try:
        spec_text, spec = jobs.load_spec_text(config_path)
    except SpecError as exc:
        raise click.ClickException(f"invalid job spec {config_path}: {exc}") from None
    settings = Settings()
    if settings.gateway_url:
        return _train_through_gateway(settings, config_path, spec.name, order, tier, auction_timeout, output, no_wait)
    ledger = open_ledger(settings)
    user = load_account(settings)
    with Storage(settings.ipfs_api, settings.ipfs_replicas) as storage:
        with console.status("pinning the spec and escrowing the budget"):
            job_id = jobs.submit(ledger, user, storage, spec_text, order)
        console.print(f"job {job_id}: {spec.name}, budget {zen(order.max_budget)} escrowed")
        if no_wait:
            click.echo(job_id)
            return
        with console.status("auction: waiting for providers to bid"):
            jobs.wait_for_auction(ledger, user, job_id, auction_timeout)
        clearing = ledger.slot(job_id, 0)["price"]
        console.print(f"auction cleared at {zen(clearing)} per GPU-hour")
        _follow(ledger, storage, job_id)
        with console.status("waiting for verification and settling"):
            settlement = jobs.settle(ledger, user, job_id)
        output = output or Path("weights") / f"job-{job_id}.pt"
        cid, state_hash = jobs.fetch_weights(ledger, storage, job_id, output)
    _print_outcome(cid, state_hash, output, settlement.block, settlement.tx, settlement.payment, settlement.fee,
                   settlement.refund)


def _print_outcome(cid: str, state_hash: str, path: Path, block: int, tx: str, paid: int, fee: int,
                   refund: int) -> None:
    """The journey's last lines, whichever way it went: the result and the settlement."""
    console.print(f"result: checkpoint {cid} (state {state_hash[:16]}…), weights written to {path}")
    console.print(f"settled in block {block} (tx {tx}): paid {zen(paid)}, fee {zen(fee)} (5%), refunded {zen(refund)}")


def _train_through_gateway(settings: Settings, config_path: Path, name: str, order: jobs.Order, tier: str,
                           auction_timeout: int, output: Path | None, no_wait: bool) -> None:
    """The same journey through the gateway at ZOO_GATEWAY_URL, signing with the wallet here (the SDK)."""
    with Client(settings.gateway_url, wallet=load_account(settings), ipfs_api=settings.ipfs_api,
                ipfs_replicas=settings.ipfs_replicas) as client:
        with console.status("uploading the spec and escrowing the budget"):
            job = client.train(config_path, Decimal(order.max_budget) / ZEN, max_price=Decimal(order.max_price) / ZEN,
                               tier=tier, nodes=order.nodes, sample_rate_bps=order.sample_rate_bps,
                               checkpoint_interval=order.checkpoint_interval)
        console.print(f"job {job.id}: {name}, budget {zen(order.max_budget)} escrowed")
        if no_wait:
            click.echo(job.id)
            return
        final = follow_job(job, auction_timeout)
        console.print(f"auction cleared at {zen(int(final['clearing_price']))} per GPU-hour")
        with console.status("downloading and checking the final checkpoint"):
            result = job.result(output)
    settled = final["settlement"]
    _print_outcome(result.cid, result.state_hash[2:], result.path, settled["block_number"], settled["tx_hash"],
                   int(settled["payment"]), int(settled["fee"]), int(settled["refund"]))


def _follow(ledger, storage: Storage, job_id: int) -> None:
    columns = (TextColumn("training"), BarColumn(), MofNCompleteColumn(), TextColumn("units"),
               TextColumn("{task.fields[loss]}"), TextColumn("{task.fields[zen]}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("train", total=None, loss="", zen="")

        def show(now: jobs.Progress) -> None:
            loss = f"loss {now.loss:.3f}" if now.loss is not None else ""
            bar.update(task, total=now.units_total, completed=now.units_done, loss=loss,
                       zen=f"{rounded(now.accrued, 4)} ZEN accrued")

        final = jobs.follow(ledger, storage, job_id, show)
    if final.status == JobStatus.CANCELLED:
        raise jobs.JobError(f"job {job_id} was cancelled")


def follow_job(job: Job, auction_timeout: float | None = None) -> dict:
    """Follow a job through a gateway with a progress bar of its units, loss and pay, until it is settled
    (cancelled for a full refund if no auction fills within `auction_timeout` seconds)."""
    columns = (TextColumn(f"job {job.id}"), TextColumn("{task.fields[status]}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("units"), TextColumn("{task.fields[loss]}"), TextColumn("{task.fields[zen]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("job", total=None, status="", loss="", zen="")

        def show(now: dict) -> None:
            loss = f"loss {now['loss']:.3f}" if now["loss"] is not None else ""
            bar.update(task, total=now["units_total"], completed=now["units_done"], status=now["status"], loss=loss,
                       zen=f"{rounded(int(now['accrued']), 4)} ZEN accrued")

        return job.wait(on_progress=show, auction_timeout=auction_timeout)
