"""`zoo-compute wallet`: create, import and inspect the encrypted keystore this machine signs
with."""

from __future__ import annotations

import sys
from decimal import Decimal, InvalidOperation, localcontext

import click
from rich.console import Console

from marketplace import wallet as keystore
from marketplace.chain.ledger import Ledger
from marketplace.cli.chain import connect
from marketplace.config import Settings

ETHER = 10**18
MAX_ZEN = Decimal(2**256) / ETHER  # a uint256 of wei
MAX_DIGITS = 100  # enough for any amount below MAX_ZEN down to the wei


def open_ledger(settings: Settings) -> Ledger:
    """The ledger at ZOO_RPC_URL, from ZOO_MANIFEST (default deployments/<chain id>.json)."""
    w3 = connect(settings.rpc_url)
    return Ledger(w3, settings.deployment(w3.eth.chain_id))


def amount(wei: int) -> str:
    """A wei amount of an 18-decimal token, for people."""
    return f"{wei / ETHER:,.6f}"


class ZenAmount(click.ParamType):
    """A positive ZEN amount typed on the command line (e.g. 5000 or 0.5), given to the command in
    wei."""

    name = "zen"

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        try:
            zen = Decimal(value)
        except InvalidOperation:
            self.fail(f"{value!r} is not a number of ZEN", param, ctx)
        if not zen.is_finite() or zen <= 0:
            self.fail(f"must be more than 0 ZEN, got {value}", param, ctx)
        if zen >= MAX_ZEN:
            self.fail(f"must be less than {MAX_ZEN:.3e} ZEN, got {value}", param, ctx)
        with localcontext(prec=MAX_DIGITS):  # exact: no rounding of the wei
            wei = zen.scaleb(18)
        if wei != wei.to_integral_value():
            self.fail(f"ZEN has 18 decimals, got {value}", param, ctx)
        return int(wei)


ZEN_AMOUNT = ZenAmount()


@click.group()
def wallet() -> None:
    """The keystore this machine signs with.

    The keystore is ZOO_WALLET, else the only one under ZOO_HOME/keystore (default
    ~/.zoo-compute/keystore). The password comes from ZOO_WALLET_PASSWORD, the file
    ZOO_WALLET_PASSWORD_FILE names, or a prompt. While a devnet runs from this checkout, its
    user's settings (.devnet/user.env) fill what the environment leaves unset, as for every command:
    the wallet is then the devnet user's.
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
    account, path = keystore.import_key(
        settings, key, keystore.resolve_password(settings, confirm=True)
    )
    click.echo(f"{account.address}  (keystore {path})")


@wallet.command("address")
def address_command() -> None:
    """Print the wallet's address (no password needed)."""
    click.echo(keystore.address_of(keystore.keystore_path(Settings())))


@wallet.command("balance")
def balance_command() -> None:
    """Show the wallet's ETH (for gas) and ZEN: on the chain at ZOO_RPC_URL, or through
    ZOO_GATEWAY_URL if set."""
    from marketplace.cli.access import reach_ledger  # which imports this module's open_ledger

    with reach_ledger(Settings(), signing=False) as (ledger, address):
        standing = ledger.standing(address)
    console = Console()
    console.print(f"{address}")
    console.print(f"ETH {amount(standing.eth):>24}")
    console.print(f"ZEN {amount(standing.zen):>24}")
