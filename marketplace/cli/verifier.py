"""`zoo-compute verifier`: register and stake a verifier, run its watcher daemon and its workers."""

from __future__ import annotations

import logging
import os
import signal
import threading

import click
from rich.console import Console
from rich.table import Table

from marketplace.cli.access import reach_ledger
from marketplace.cli.wallet import ZEN_AMOUNT, amount, open_ledger
from marketplace.config import Settings
from marketplace.protocol.terms import Role
from marketplace.storage import Storage
from marketplace.wallet import load_account

console = Console()


log_level_option = click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
    help="How much the process logs.",
)


@click.group()
def verifier() -> None:
    """Verify sampled work units: register, stake, run the daemon and its workers.

    Settings come from ZOO_* environment variables: ZOO_RPC_URL, ZOO_MANIFEST, ZOO_IPFS_API,
    ZOO_IPFS_REPLICAS, ZOO_REDIS_URL, ZOO_HOME, ZOO_WALLET, ZOO_WALLET_PASSWORD(_FILE),
    ZOO_POLL_INTERVAL, ZOO_CONFIRMATIONS; while a devnet runs from this checkout,
    .devnet/user.env fills what they leave unset. With ZOO_GATEWAY_URL set, register, stake and
    status go through that gateway (the wallet still signs here); `start` always talks to the chain.
    """


@verifier.command("register")
@click.option(
    "--endpoint",
    required=True,
    help="URL where this verifier can be reached, as published on-chain.",
)
def register_command(endpoint: str) -> None:
    """Register the wallet's account as a verifier."""
    with reach_ledger(Settings(), signing=True) as (ledger, address):
        ledger.register_verifier(endpoint)
    console.print(f"registered verifier {address} at {endpoint}")


@verifier.command("stake")
@click.option(
    "--amount",
    "wei",
    required=True,
    type=ZEN_AMOUNT,
    help="ZEN to add to the stake, e.g. 5000 or 0.5.",
)
def stake_command(wei: int) -> None:
    """Stake ZEN as a verifier in one transaction (an ERC-2612 permit); active from the minimum
    stake."""
    with reach_ledger(Settings(), signing=True) as (ledger, address):
        ledger.stake(wei)
        console.print(f"{address} stakes {amount(ledger.standing(address).staked)} ZEN")


@verifier.command("status")
def status_command() -> None:
    """Show this verifier's registration, stake and the fees owed to it."""
    with reach_ledger(Settings(), signing=False) as (ledger, address):
        standing = ledger.standing(address)
    table = Table(title=f"verifier {address}", show_header=False)
    table.add_row("registered", "yes" if standing.role == Role.VERIFIER.label else "no")
    table.add_row("staked ZEN", amount(standing.staked))
    table.add_row("unbonding ZEN", amount(standing.unbonding))
    table.add_row("owed ZEN", amount(standing.owed))
    console.print(table)


@verifier.command("start")
@click.option(
    "--withheld-after",
    "withheld_after",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="Seconds a re-run asks for a checkpoint the unit's own provider committed before it "
    "counts as withheld and the unit fails (less when this verifier's turn ends sooner).",
)
@log_level_option
def start_command(withheld_after: float, log_level: str) -> None:
    """Run the watcher daemon in the foreground until SIGTERM or Ctrl-C.

    It queues sampled units for `verifier worker` processes over Redis, posts their verdicts,
    answers other verifiers' disputes, attests benchmarks of registering providers and reports
    overdue slots. Its journal lives in ZOO_HOME/verifier.sqlite3. Prints a line starting
    "verifier ready" once it is watching. The daemon talks to the chain at ZOO_RPC_URL, never
    through a gateway.
    """
    from verifier.celery_app import configure
    from verifier.daemon import VerifierDaemon
    from verifier.journal import Journal

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()
    account = load_account(settings)
    ledger = open_ledger(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    journal = Journal(settings.home / "verifier.sqlite3")
    storage = Storage(settings.ipfs_api, settings.ipfs_replicas)
    try:
        daemon = VerifierDaemon(
            ledger,
            account,
            journal,
            storage,
            configure(settings.redis_url),
            confirmations=settings.confirmations,
            withheld_patience=withheld_after,
        )
        console.print(
            f"verifier ready: {account.address} watching {settings.rpc_url} "
            f"from block {daemon.cursor.next_block}",
            highlight=False,
        )
        daemon.run(stop, settings.poll_interval)
    finally:
        storage.close()
        journal.close()
    console.print("verifier stopped")


@verifier.command("worker")
@click.option(
    "--concurrency",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Units re-run at once; each takes the threads its job spec fixes.",
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="Device units are re-run on.",
)
@click.option(
    "--reproduces",
    "classes",
    multiple=True,
    metavar="CLASS_ID",
    help="An execution class (16 hex digits, as units record it) this machine re-runs bit for "
    "bit besides its own; its units are judged by their exact hash. Repeatable.",
)
@log_level_option
def worker_command(concurrency: int, device: str, classes: tuple[str, ...], log_level: str) -> None:
    """Run a Celery worker that re-runs units queued by `verifier start` (broker: ZOO_REDIS_URL).

    A unit of this worker's execution class (or one it --reproduces) is judged by its exact
    state hash, any other within the calibrated tolerance. Celery prints "ready." once it takes
    tasks; SIGTERM lets the current unit finish, then exits.
    """
    from marketplace.protocol.execution import is_class_id
    from verifier.celery_app import QUEUE, configure
    from verifier.recompute import CLASSES_ENV, DEVICE_ENV

    for cls in classes:
        if not is_class_id(cls):
            raise click.BadParameter(f"{cls!r} is not a class id", param_hint="--reproduces")
    os.environ[DEVICE_ENV] = device
    os.environ[CLASSES_ENV] = ",".join(classes)

    app = configure(Settings().redis_url)
    app.worker_main(
        [
            "worker",
            "--concurrency",
            str(concurrency),
            "--loglevel",
            log_level,
            "--queues",
            QUEUE,
            "--without-gossip",
            "--without-mingle",
            "--hostname",
            "verifier@%h",
        ]
    )
