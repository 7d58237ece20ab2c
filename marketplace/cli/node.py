"""`zoo-compute node`: register, stake, run and inspect this machine as a compute provider."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from marketplace.chain.ledger import Hardware
from marketplace.cli.access import LedgerAccess, reach_ledger
from marketplace.cli.wallet import ZEN_AMOUNT, amount, open_ledger
from marketplace.config import Settings
from marketplace.protocol.terms import Role, Tier
from marketplace.storage import Storage
from marketplace.wallet import load_account

console = Console()


def journal_path(settings: Settings) -> Path:
    return settings.home / "node" / "journal.sqlite3"


replicas_option = click.option(
    "--replicas",
    default=3,
    show_default=True,
    type=click.IntRange(1),
    help="IPFS nodes to pin on: ZOO_IPFS_API first, then ZOO_IPFS_REPLICAS.",
)
device_option = click.option(
    "--device",
    default=None,
    help="Torch device, e.g. cpu or cuda:0 [default: cuda if present, else cpu].",
)


@click.group()
def node() -> None:
    """Run this machine as a compute provider.

    Configuration comes from ZOO_* environment variables (ZOO_RPC_URL, ZOO_MANIFEST, ZOO_IPFS_API,
    ZOO_IPFS_REPLICAS, ZOO_HOME, ZOO_WALLET, ZOO_WALLET_PASSWORD or ZOO_WALLET_PASSWORD_FILE);
    while a devnet runs from this checkout, .devnet/user.env fills what they leave unset.
    With ZOO_GATEWAY_URL set, register, stake, status and withdraw go through that gateway (the
    wallet still signs here); `start` always talks to the chain at ZOO_RPC_URL, and posts its
    jobs' log lines to the gateway.
    """


@node.command("register")
@click.option(
    "--tier",
    type=click.Choice(Tier.labels()),
    default="community",
    show_default=True,
    help="Tier to sell in; the hardware must meet its minimums.",
)
@click.option(
    "--gpu-type", default="cpu", show_default=True, help="GPU model, or cpu for a CPU node."
)
@click.option(
    "--gpus",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="GPU count (0 for a CPU node).",
)
@click.option(
    "--memory", default=0, show_default=True, type=click.IntRange(0), help="Memory per GPU in GB."
)
@click.option(
    "--network-gbps",
    default=1,
    show_default=True,
    type=click.IntRange(0),
    help="Network bandwidth in Gbit/s.",
)
@click.option(
    "--endpoint",
    default="",
    help="Where this node can be reached, e.g. tcp://node.example:29500; "
    "a group job's rank 0 hosts the group on its port "
    "(without one, the node bids for single-node jobs only).",
)
@replicas_option
@device_option
def register_command(
    tier: str,
    gpu_type: str,
    gpus: int,
    memory: int,
    network_gbps: int,
    endpoint: str,
    replicas: int,
    device: str | None,
) -> None:
    """Run the admission benchmark, pin its report and register with it as the attestation.

    A verifier then checks the report and attests it; `node start` waits for that.
    """
    from node.daemon.onboarding import attestation_of, publish_benchmark

    settings = Settings()
    with reach_ledger(settings, signing=True) as (ledger, address):
        with (
            Storage(settings.ipfs_api, settings.ipfs_replicas) as storage,
            console.status("running the matmul benchmark and pinning its report"),
        ):
            report, cid = publish_benchmark(storage, replicas, device)
        hardware = Hardware(gpu_type, gpus, memory, network_gbps, endpoint, attestation_of(cid))
        with console.status("registering"):
            ledger.register_provider(tier, hardware)
    console.print(
        f"registered {address} in tier {tier}: benchmark {report.gflops} GFLOP/s, "
        f"report {cid}; waiting for a verifier's attestation"
    )


@node.command("stake")
@click.option(
    "--amount", "wei", required=True, type=ZEN_AMOUNT, help="ZEN to stake, e.g. 1000 or 1500.5."
)
def stake_command(wei: int) -> None:
    """Stake ZEN in one transaction (an ERC-2612 permit signed by the wallet)."""
    with reach_ledger(Settings(), signing=True) as (ledger, address):
        with console.status(f"staking {amount(wei)} ZEN"):
            ledger.stake(wei)
        console.print(f"staked {amount(wei)} ZEN; total {amount(ledger.standing(address).staked)}")


@node.command("start")
@click.option(
    "--cost-floor",
    default="1",
    show_default=True,
    type=ZEN_AMOUNT,
    help="Your cost of one GPU-hour in ZEN (a CPU node counts as 1 GPU); never bids below it.",
)
@click.option(
    "--margin-bps",
    default=2_000,
    show_default=True,
    type=click.IntRange(0),
    help="Asked above the cost floor, in basis points, as far as a job's max price allows.",
)
@click.option(
    "--data-dir",
    "data_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A directory jobs' `file` data sources may read (repeatable); by default none.",
)
@click.option(
    "--max-parameters",
    default=1_000_000_000,
    show_default=True,
    type=click.IntRange(1),
    help="Jobs whose model has more parameters are not bid on.",
)
@click.option(
    "--max-source-mb",
    default=4096,
    show_default=True,
    type=click.IntRange(1),
    help="Largest data source (downloaded or generated) one job may use, in MB.",
)
@click.option(
    "--max-memory-mb",
    default=None,
    type=click.IntRange(1),
    help="Peak memory one unit may take, estimated from its spec before bidding, in MB "
    "[default: this machine's RAM].",
)
@click.option(
    "--max-unit-seconds",
    default=None,
    type=click.IntRange(1),
    help="Seconds one unit may take here, estimated from its spec and this machine's measured "
    "speed; a unit must also fit three times in the job's checkpoint interval [default: 3600].",
)
@click.option(
    "--max-unit-tokens",
    default=None,
    type=click.IntRange(1),
    help="Tokens one unit may train on (steps x batch x accumulation x sequence length) "
    "[default: 2**32].",
)
@click.option(
    "--max-threads",
    default=None,
    type=click.IntRange(1),
    help="CPU threads one unit may ask for [default: this machine's cores].",
)
@click.option(
    "--max-devices",
    default=None,
    type=click.IntRange(1),
    help="Devices one unit may train on (resources.devices) [default: this machine's CUDA "
    "devices, else 64 CPU workers, which --max-threads bounds].",
)
@click.option(
    "--max-dedup-mb",
    default=None,
    type=click.IntRange(1),
    help="Memory of a job's full dedup window, in MB [default: 2048].",
)
@click.option(
    "--min-checkpoint-interval",
    default=30,
    show_default=True,
    type=click.IntRange(1),
    help="Seconds: jobs asking a checkpoint more often than this are not bid on.",
)
@click.option(
    "--measure-speed",
    is_flag=True,
    help="Time this machine again at start rather than use the speed remembered under "
    "$XDG_CACHE_HOME/zoo-compute (~/.cache/zoo-compute) from an earlier start; the hardware, "
    "torch and the engine are the key, so a change of any of them is measured anyway.",
)
@replicas_option
@device_option
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="How much the daemon logs.",
)
def start_command(
    cost_floor: int,
    margin_bps: int,
    data_dirs: tuple[Path, ...],
    max_parameters: int,
    max_source_mb: int,
    max_memory_mb: int | None,
    max_unit_seconds: int | None,
    max_unit_tokens: int | None,
    max_threads: int | None,
    max_devices: int | None,
    max_dedup_mb: int | None,
    min_checkpoint_interval: int,
    measure_speed: bool,
    replicas: int,
    device: str | None,
    log_level: str,
) -> None:
    """Run the provider daemon in the foreground until SIGTERM or Ctrl-C.

    It waits for the benchmark attestation, then bids, trains what it wins, commits checkpoints
    and collects its pay. Its journal lives in ZOO_HOME/node/journal.sqlite3. The daemon is a
    participant of the chain itself: it talks to ZOO_RPC_URL, never through a gateway. With
    ZOO_GATEWAY_URL set, it also posts a line to the job's log there for each unit it commits
    (steps, loss, checkpoint, block), which `zoo-compute jobs logs` shows.
    """
    from marketplace.sdk.joblog import JobLog
    from node.daemon import NodeConfig, Pricing, ProviderDaemon
    from node.engine import LocalData, UnitLimits
    from node.engine.speed import forget_speed, speed_folder

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings()
    account = load_account(settings)
    ledger = open_ledger(settings)
    # the limits set here; the engine's defaults (node/engine/limits.py) for the rest
    chosen = {
        "max_memory_bytes": None if max_memory_mb is None else max_memory_mb << 20,
        "max_unit_seconds": max_unit_seconds,
        "max_unit_tokens": max_unit_tokens,
        "max_threads": max_threads,
        "max_devices": max_devices,
        "max_dedup_bytes": None if max_dedup_mb is None else max_dedup_mb << 20,
    }
    config = NodeConfig(
        pricing=Pricing(cost_floor, margin_bps),
        journal_path=journal_path(settings),
        ipfs_api=settings.ipfs_api,
        ipfs_replicas=tuple(settings.ipfs_replicas),
        replicas=replicas,
        device=device,
        poll_interval=settings.poll_interval,
        confirmations=settings.confirmations,
        min_checkpoint_interval=min_checkpoint_interval,
        limits=UnitLimits(
            max_parameters=max_parameters,
            max_source_bytes=max_source_mb << 20,
            **{name: value for name, value in chosen.items() if value is not None},
        ),
        local_data=LocalData(data_dirs, max_bytes=max_source_mb << 20),
    )
    if measure_speed:
        forget_speed(speed_folder())
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    job_log = JobLog(settings.gateway_url, account) if settings.gateway_url else None
    try:
        ProviderDaemon(ledger, account, config, job_log).run(
            stop, on_ready=lambda message: click.echo(message)
        )
    finally:
        if job_log is not None:
            job_log.close()
    click.echo("stopped")


@node.command("status")
def status_command() -> None:
    """Show this provider's tier, stake, admission, held job slots and pay owed."""
    settings = Settings()
    with reach_ledger(settings, signing=False) as (ledger, address):
        standing = ledger.standing(address)
        held = _held(settings, ledger, address)
    table = Table(title=f"provider {address}", show_header=False)
    table.add_row("registered", "yes" if standing.role == Role.PROVIDER.label else "no")
    table.add_row("tier", standing.tier_name)
    table.add_row(
        "admitted", "yes" if standing.admitted else "no (awaiting a verifier's attestation)"
    )
    table.add_row("staked ZEN", amount(standing.staked))
    table.add_row("locked ZEN", amount(standing.locked))
    table.add_row("unbonding ZEN", amount(standing.unbonding))
    table.add_row("jobs held", ", ".join(f"job {j} slot {s}" for j, s in held) or "none")
    table.add_row("owed ZEN", amount(standing.owed))
    console.print(table)


def _held(settings: Settings, ledger: LedgerAccess, address: str) -> list[tuple[int, int]]:
    """Slots the journal says this node works, confirmed against the ledger."""
    from node.daemon.journal import Journal

    path = journal_path(settings)
    if not path.exists():
        return []
    journal = Journal(path)
    try:
        return [(j, s) for j, s in journal.held_slots() if ledger.slot_provider(j, s) == address]
    finally:
        journal.close()


@node.command("withdraw")
def withdraw_command() -> None:
    """Withdraw the pay owed to this provider by settled jobs."""
    with reach_ledger(Settings(), signing=True) as (ledger, address):
        owed = ledger.standing(address).owed
        if not owed:
            console.print("nothing owed")
            return
        with console.status(f"withdrawing {amount(owed)} ZEN"):
            ledger.withdraw()
    console.print(f"withdrew {amount(owed)} ZEN")
