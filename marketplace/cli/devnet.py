"""`zoo-compute devnet`: the whole network on loopback, in one command."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from marketplace.devnet import STATE_DIR
from marketplace.devnet.network import Devnet, State

console = Console()
root_option = click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=STATE_DIR,
    show_default=True,
    help="Folder for the devnet's state and logs.",
)


@click.group()
def devnet() -> None:
    """Start, inspect and stop a local devnet."""


@devnet.command()
@root_option
@click.option(
    "--providers",
    default=3,
    show_default=True,
    type=click.IntRange(1, 16),
    help="Provider nodes to start.",
)
@click.option(
    "--verifiers",
    default=2,
    show_default=True,
    type=click.IntRange(1, 4),
    help="Verifier daemons to start (a failed unit needs a second one to confirm it).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 8),
    help="Celery workers that re-run sampled units.",
)
def up(root: Path, providers: int, verifiers: int, workers: int) -> None:
    """Start Anvil, deploy, and start IPFS, Redis, the gateway, verifiers and providers; wait until
    healthy.

    The devnet user's settings go to ROOT/user.env (removed by `down`). Every command run from
    this checkout reads .devnet/user.env for what ZOO_* variables leave unset, so `train`, `jobs`,
    `wallet`, `node` and `verifier` act as the devnet's user with its wallet;
    `set -a; . ROOT/user.env` exports the same values to a shell. The gateway (API and Celery
    indexer) runs on a free loopback port, shown with the rest; user.env leaves it out, so `train`
    talks to the chain: set ZOO_GATEWAY_URL to its URL to send `train`, `node`, `verifier` and
    `wallet` through it.
    """
    net = Devnet(root, providers=providers, verifiers=verifiers, workers=workers)
    started = time.monotonic()
    with console.status("starting the devnet") as status:
        state = net.up(progress=lambda message: status.update(message))
    console.print(f"[green]devnet up[/] in {time.monotonic() - started:.0f}s")
    _show(net.status())
    console.print(f"state and logs: {state.root}")


@devnet.command("add-provider")
@root_option
def add_provider(root: Path) -> None:
    """Start one more provider on the running devnet: funded, staked, with its own IPFS node.

    A spare node bids for slots the others cannot take, such as a re-auctioned rank of a group
    job whose other ranks are its own providers.
    """
    with console.status("registering, staking and starting a provider"):
        address = Devnet(root).add_provider()
    console.print(f"[green]provider {address}[/] started; the verifiers admit it shortly")


@devnet.command()
@root_option
def down(root: Path) -> None:
    """Stop exactly the processes `up` started, by pid."""
    stopped = Devnet(root).down()
    console.print(f"stopped {len(stopped)} process(es): {', '.join(stopped) or 'none running'}")


@devnet.command()
@root_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def status(root: Path, as_json: bool) -> None:
    """Show each process, the chain and where everything is.

    When no devnet runs here (none started, or stopped by `down`), it says so and exits with status
    1, so `zoo-compute devnet status >/dev/null` tells a script whether one runs.
    """
    info = Devnet(root).status()
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        _show(info)


@devnet.command()
@root_option
@click.argument("service", required=False)
@click.option("--lines", "-n", default=40, show_default=True, help="Lines to show from the end.")
def logs(root: Path, service: str | None, lines: int) -> None:
    """Show the end of a service's log (all services without SERVICE)."""
    state = State.load(root)
    services = [state.service(service)] if service else state.services
    for s in services:
        console.rule(s.name)
        text = Path(s.log).read_text(errors="replace").splitlines() if Path(s.log).exists() else []
        click.echo("\n".join(text[-lines:]))


def _show(info: dict) -> None:
    chain = info["chain"]
    answer = f"chain id {chain['chain_id']}, block {chain['block']}" if chain else "not answering"
    console.print(f"chain: {info['rpc_url']} ({answer})")
    console.print(f"manifest: {info['manifest']}")
    for name, addr in info["ipfs"].items():
        console.print(f"ipfs {name}: {addr}")
    if info["redis_url"]:
        console.print(f"redis: {info['redis_url']}")
    if info["gateway_url"]:
        url = info["gateway_url"]
        console.print(f"gateway: {url} (API docs {url}/docs, explorer {url}/ui/explorer/)")
    table = Table("service", "pid", "state", "log")
    for s in info["services"]:
        table.add_row(
            s["name"], str(s["pid"]), "[green]up[/]" if s["alive"] else "[red]down[/]", s["log"]
        )
    console.print(table)
