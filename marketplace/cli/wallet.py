"""`zoo-compute wallet`: create, import and inspect the encrypted keystore this machine signs with."""

from __future__ import annotations

import sys
from decimal import Decimal, InvalidOperation

import click
from rich.console import Console

from marketplace import wallet as keystore
from marketplace.chain.ledger import Ledger
from marketplace.cli.chain import connect
from marketplace.config import Settings

ETHER = 10**18


def open_ledger(settings: Settings) -> Ledger:
    """The ledger at ZOO_RPC_URL, from ZOO_MANIFEST (default deployments/<chain id>.json)."""
    w3 = connect(settings.rpc_url)
    return Ledger(w3, settings.deployment(w3.eth.chain_id))


def amount(wei: int) -> str:
    """A wei amount of an 18-decimal token, for people."""
    return f"{wei / ETHER:,.6f}"


def zen_amount(text: str) -> int:
    """A positive ZEN amount typed on the command line (e.g. 5000 or 0.5), in wei."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise click.BadParameter(f"{text!r} is not a number of ZEN") from None
    if value <= 0:
        raise click.BadParameter("must be more than 0 ZEN")
    return int(value * ETHER)


@click.group()
def wallet() -> None:
    """The keystore this machine signs with.

    Keystores live under ZOO_HOME/keystore (default ~/.zoo-compute/keystore). The password
    comes from ZOO_WALLET_PASSWORD, the file ZOO_WALLET_PASSWORD_FILE names, or a prompt.
    """


@wallet.command("new")
def new_command() -> None:
    """Create a key and save it encrypted."""
    settings = Settings()
    account, path = keystore.create(settings, keystore.resolve_password(settings, confirm=True))
    click.echo(f"{account.address}  (keystore {path})")


@wallet.command("import")
def import_command() -> None:
    """Import a private key read from a hidden prompt, or from stdin when it is piped."""
    settings = Settings()
    if sys.stdin.isatty():
        key = click.prompt("Private key (hex)", hide_input=True)
    else:
        key = sys.stdin.readline()
    account, path = keystore.import_key(settings, key, keystore.resolve_password(settings, confirm=True))
    click.echo(f"{account.address}  (keystore {path})")


@wallet.command("address")
def address_command() -> None:
    """Print the wallet's address (no password needed)."""
    click.echo(keystore.address_of(keystore.keystore_path(Settings())))


@wallet.command("balance")
def balance_command() -> None:
    """Show the wallet's ETH (for gas) and ZEN: on the chain at ZOO_RPC_URL, or through ZOO_GATEWAY_URL if set."""
    from marketplace.cli.access import reach_ledger  # which imports this module's open_ledger

    with reach_ledger(Settings(), signing=False) as (ledger, address):
        standing = ledger.standing(address)
    console = Console()
    console.print(f"{address}")
    console.print(f"ETH {amount(standing.eth):>24}")
    console.print(f"ZEN {amount(standing.zen):>24}")
