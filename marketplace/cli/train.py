"""`zoo-compute train`: escrow a budget, auction the job, follow the training, settle, get the
weights; through the gateway at ZOO_GATEWAY_URL when one is set, else straight to the chain at
ZOO_RPC_URL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from marketplace import jobs
from marketplace.chain.zen import rounded
from marketplace.cli.wallet import ZEN_AMOUNT, open_ledger
from marketplace.config import Settings
from marketplace.protocol import journey
from marketplace.protocol.spec import SpecError
from marketplace.protocol.terms import DEFAULT_UNIT_GPU_SECONDS, JobStatus, Tier
from marketplace.sdk import Client, Job
from marketplace.storage import Storage
from marketplace.wallet import load_account

console = Console()
JourneyJob = jobs.ChainJob | Job  # the journey's two transports, with the same calls


def zen(wei: int) -> str:
    return f"{rounded(wei)} ZEN"


@click.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Job spec (YAML; see node/specs/README.md).",
)
@click.option(
    "--max-budget",
    required=True,
    type=ZEN_AMOUNT,
    help="Most ZEN to spend; escrowed, the unspent part refunded.",
)
@click.option(
    "--max-price",
    default="100",
    show_default=True,
    type=ZEN_AMOUNT,
    help="Most ZEN per GPU-hour to pay a provider.",
)
@click.option(
    "--tier",
    type=click.Choice(Tier.labels()),
    default="community",
    show_default=True,
    help="Provider tier to buy from.",
)
@click.option(
    "--nodes", type=click.IntRange(1, 64), help="Providers to train on [default: the spec's]."
)
@click.option(
    "--sample-rate",
    default=1_000,
    show_default=True,
    type=click.IntRange(0, 10_000),
    help="Share of work units verifiers re-run, in basis points.",
)
@click.option(
    "--checkpoint-interval",
    default=600,
    show_default=True,
    type=click.IntRange(1),
    help="Seconds a provider may go without a checkpoint before it can be reported.",
)
@click.option(
    "--unit-gpu-seconds",
    default=DEFAULT_UNIT_GPU_SECONDS,
    show_default=True,
    type=click.IntRange(1, 2**32 - 1),
    help="What one work unit is worth, in GPU-seconds of the tier's reference GPU: each unit pays "
    "the clearing price x this / 3600, whatever hardware runs it or however long it takes.",
)
@click.option(
    "--auction-timeout",
    default=120,
    show_default=True,
    type=click.IntRange(1),
    help="Seconds to wait for the auction to fill before cancelling for a full refund.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the trained weights [default: weights/job-<id>.pt].",
)
@click.option("--no-wait", is_flag=True, help="Print the job id once escrowed and return.")
def train(
    config_path: Path,
    max_budget: int,
    max_price: int,
    tier: str,
    nodes: int | None,
    sample_rate: int,
    checkpoint_interval: int,
    unit_gpu_seconds: int,
    auction_timeout: int,
    output: Path | None,
    no_wait: bool,
) -> None:
    """Train a model on the market: escrow, auction, training, settlement, weights back by CID."""
    order = jobs.Order(
        max_budget=max_budget,
        max_price=max_price,
        tier=Tier.named(tier),
        nodes=nodes,
        sample_rate_bps=sample_rate,
        checkpoint_interval=checkpoint_interval,
        unit_gpu_seconds=unit_gpu_seconds,
    )
    try:
        spec_text, spec = jobs.load_spec_text(config_path)
    except SpecError as exc:
        raise click.ClickException(f"invalid job spec {config_path}: {exc}") from None
    with submitter(Settings()) as submit:
        with console.status("pinning the spec and escrowing the budget"):
            job = submit(spec_text, order)
        console.print(f"job {job.id}: {spec.name}, budget {zen(order.max_budget)} escrowed")
        if no_wait:
            click.echo(job.id)
            return
        settlement = follow_to_settlement(job, auction_timeout)
        with console.status("downloading and checking the final checkpoint"):
            result = job.result(output)
    console.print(result_line(result))
    console.print(
        f"settled in block {settlement.block} (tx {settlement.tx}): "
        f"paid {zen(settlement.payment)}, fee {zen(settlement.fee)} (5%), "
        f"refunded {zen(settlement.refund)}"
    )


def result_line(result: journey.Result) -> str:
    """What a fetched result says, in `train` and in `jobs result` alike."""
    return (
        f"result: checkpoint {result.cid} (state {result.state_hash[2:18]}…), "
        f"weights written to {result.path}"
    )


@contextmanager
def submitter(settings: Settings) -> Iterator[Callable[[str, jobs.Order], JourneyJob]]:
    """How the user's job reaches the chain: through the gateway at ZOO_GATEWAY_URL, signed with the
    wallet here (the SDK), or with the wallet sending to the ledger at ZOO_RPC_URL itself."""
    if settings.gateway_url:
        with Client(
            settings.gateway_url,
            wallet=load_account(settings),
            ipfs_api=settings.ipfs_api,
            ipfs_replicas=settings.ipfs_replicas,
        ) as client:
            yield client.submit
        return
    ledger = open_ledger(settings)
    user = load_account(settings)
    with Storage(settings.ipfs_api, settings.ipfs_replicas) as storage:

        def submit(spec_text: str, order: jobs.Order) -> jobs.ChainJob:
            return jobs.ChainJob(
                ledger, user, jobs.submit(ledger, user, storage, spec_text, order), storage
            )

        yield submit


def follow_to_settlement(
    job: JourneyJob, auction_timeout: float | None = None
) -> journey.Settlement:
    """The job's journey on screen, whichever way it reaches the chain: its auction (cancelled for a
    full refund if none fills within `auction_timeout` seconds), a progress bar of its training
    (units, loss, ZEN accrued), then verification and settlement."""
    with console.status("auction: waiting for providers to bid"):
        job.wait(until=JobStatus.RUNNING, auction_timeout=auction_timeout)
    console.print(f"auction cleared at {zen(job.clearing_price())} per GPU-hour")
    columns = (
        TextColumn("training"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("units"),
        TextColumn("{task.fields[loss]}"),
        TextColumn("{task.fields[zen]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("train", total=None, loss="", zen="")

        def show(now: journey.Progress) -> None:
            loss = f"loss {now.loss:.3f}" if now.loss is not None else ""
            bar.update(
                task,
                total=now.units_total,
                completed=now.units_done,
                loss=loss,
                zen=f"{rounded(now.accrued, 4)} ZEN accrued",
            )

        job.wait(show, until=JobStatus.COMPLETED)
    with console.status("verification") as status:
        job.wait(on_wait=status.update)
    return job.settlement()
