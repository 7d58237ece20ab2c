"""`zoo-compute jobs`: list, show, follow, fetch and cancel jobs through a gateway (the SDK), for
people or scripts."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from marketplace.cli.train import follow_to_settlement, result_line, zen
from marketplace.config import Settings
from marketplace.devnet import STATE_DIR
from marketplace.devnet.network import State
from marketplace.errors import ZooError
from marketplace.protocol.terms import JOB_STATUSES
from marketplace.protocol.text import printable
from marketplace.sdk import Client
from marketplace.wallet import load_account

console = Console()
JSON = click.option(
    "--as-json",
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON for scripts instead of a table.",
)


def open_client(ctx: click.Context, *, wallet: bool = False) -> Client:
    """A client of the gateway (--gateway, ZOO_GATEWAY_URL or the devnet's), with the wallet when it
    must sign."""
    settings = Settings()
    url = ctx.obj or settings.gateway_url or devnet_gateway()
    if not url:
        raise ZooError(
            "no gateway: set ZOO_GATEWAY_URL, pass `zoo-compute jobs --gateway URL ...` "
            "or start the devnet"
        )
    client = Client(
        url,
        wallet=load_account(settings) if wallet else None,
        ipfs_api=settings.ipfs_api,
        ipfs_replicas=settings.ipfs_replicas,
    )
    ctx.call_on_close(client.close)
    return client


def devnet_gateway() -> str | None:
    """The gateway of the devnet running on this machine, if one runs."""
    if not (STATE_DIR / "state.json").exists():
        return None
    state = State.load(STATE_DIR)
    return state.gateway_url if state.running() else None


def emit(data) -> None:
    click.echo(json.dumps(data, indent=None, sort_keys=True))


def price(wei: str | None) -> str:
    return "-" if wei is None else zen(int(wei))


@click.group()
@click.option(
    "--gateway",
    metavar="URL",
    help="The gateway's URL [default: ZOO_GATEWAY_URL, or the devnet's].",
)
@click.pass_context
def jobs(ctx: click.Context, gateway: str | None) -> None:
    """Jobs on the market, read from a gateway; `cancel` signs with your wallet (ZOO_WALLET)."""
    ctx.obj = gateway


@jobs.command("list")
@click.option("--status", type=click.Choice(JOB_STATUSES), help="Only jobs in this status.")
@click.option("--user", metavar="ADDRESS", help="Only jobs this address created.")
@click.option("--mine", is_flag=True, help="Only jobs your wallet created.")
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(1, 200),
    help="Jobs at most, newest first.",
)
@JSON
@click.pass_context
def list_command(
    ctx, status: str | None, user: str | None, mine: bool, limit: int, as_json: bool
) -> None:
    """Jobs, newest first."""
    client = open_client(ctx, wallet=mine)
    rows = client.jobs(status=status, user=client.wallet.address if mine else user, limit=limit)
    if as_json:
        return emit(rows)
    table = Table("job", "status", "user", "nodes", "budget", "clearing price /GPU-h")
    for row in rows:
        table.add_row(
            str(row["job_id"]),
            row["status"],
            row["user"],
            str(row["nodes"]),
            price(row["budget"]),
            price(row["clearing_price"]),
        )
    console.print(table)


@jobs.command("show")
@click.argument("job_id", type=click.IntRange(0))
@JSON
@click.pass_context
def show_command(ctx, job_id: int, as_json: bool) -> None:
    """One job: its auction, slots, progress and settlement."""
    client = open_client(ctx)
    job, metrics = client.job(job_id), client.metrics(job_id)
    if as_json:
        return emit(job | {"metrics": metrics})
    table = Table(show_header=False, box=None)
    settlement = job["settlement"]
    for name, value in (
        ("job", str(job_id)),
        ("status", job["status"]),
        ("user", job["user"]),
        ("spec", job["spec_cid"]),
        ("budget", price(job["budget"])),
        ("max price /GPU-h", price(job["max_price"])),
        ("clearing price /GPU-h", price(job["clearing_price"])),
        (
            "providers",
            ", ".join(s["provider"] for s in job["slots"] if s["removed_reason"] is None) or "-",
        ),
        ("units", f"{metrics['units_done']}/{metrics['units_total']}"),
        ("loss", "-" if metrics["loss"] is None else f"{metrics['loss']:.4f}"),
        ("accrued", price(metrics["accrued"])),
        (
            "settled",
            "-"
            if settlement is None
            else f"paid {price(settlement['payment'])}, fee {price(settlement['fee'])}, "
            f"refund {price(settlement['refund'])} "
            f"(block {settlement['block_number']}, tx {settlement['tx_hash']})",
        ),
    ):
        table.add_row(name, value)
    console.print(table)


@jobs.command("logs")
@click.argument("job_id", type=click.IntRange(0))
@click.option(
    "--follow", "-f", is_flag=True, help="Keep printing new lines until the job is finished."
)
@JSON
@click.pass_context
def logs_command(ctx, job_id: int, follow: bool, as_json: bool) -> None:
    """The job's log, oldest first, as its user and providers posted it.

    A provider posts a line for each unit it commits (steps, loss, checkpoint, block) when it runs
    with ZOO_GATEWAY_URL set, as the devnet's do. A log with no lines is said so on stderr.
    """
    client = open_client(ctx)

    def show(line: dict) -> None:
        if as_json:
            emit(line)
        else:
            click.echo(f"{printable(str(line['author'])[:10])}  {printable(str(line['line']))}")

    if not client.logs(job_id):
        click.echo(no_lines(job_id, client.job(job_id)["status"]), err=True)
    for line in client.handle(job_id).logs(follow=follow):
        show(line)


def no_lines(job_id: int, status: str) -> str:
    """Why a job's log is empty, as far as the gateway can tell."""
    why = {
        "open": "its auction is open, so no provider works on it yet",
        "cancelled": "it was cancelled",
    }.get(status, "none of its providers posted any")
    yet = "" if status in ("settled", "cancelled") else " yet"
    return (
        f"job {job_id} has no log lines{yet}: {why} (a provider posts a line for each unit it "
        "commits when it runs with ZOO_GATEWAY_URL set; "
        f"`zoo-compute jobs show {job_id}` shows the units committed)"
    )


@jobs.command("result")
@click.argument("job_id", type=click.IntRange(0))
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the weights [default: weights/job-<id>.pt; for a Hugging Face model "
    "the folder weights/job-<id>].",
)
@click.option(
    "--wait",
    "wait_",
    is_flag=True,
    help="Follow a running job (a progress bar) until it is settled first.",
)
@JSON
@click.pass_context
def result_command(ctx, job_id: int, output: Path | None, wait_: bool, as_json: bool) -> None:
    """Download the trained weights, checked by CID against the state hash committed on-chain."""
    client = open_client(ctx, wallet=wait_)  # waiting may settle the job, which the wallet signs
    job = client.handle(job_id)
    if wait_:
        follow_to_settlement(job)
    elif (status := client.job(job_id)["status"]) not in ("completed", "settled"):
        raise ZooError(f"job {job_id} is {status}, not finished: pass --wait to follow it first")
    with console.status(f"downloading and checking job {job_id}'s checkpoint"):
        result = job.result(output)
    if as_json:
        return emit(
            {
                "job_id": job_id,
                "cid": result.cid,
                "state_hash": result.state_hash,
                "path": str(result.path),
            }
        )
    console.print(result_line(result))


@jobs.command("cancel")
@click.argument("job_id", type=click.IntRange(0))
@JSON
@click.pass_context
def cancel_command(ctx, job_id: int, as_json: bool) -> None:
    """Cancel a job no auction has filled yet: the whole budget comes back to your wallet."""
    job = open_client(ctx, wallet=True).handle(job_id)
    with console.status(f"cancelling job {job_id}"):
        receipt = job.cancel()
    if as_json:
        return emit(receipt)
    console.print(
        f"job {job_id} cancelled in block {receipt['block_number']} (tx {receipt['tx_hash']})"
    )
