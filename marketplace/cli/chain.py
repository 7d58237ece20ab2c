"""`zoo-compute chain`: deploy the ledger to an RPC URL and show a deployment."""

from __future__ import annotations

import os
from pathlib import Path

import click
from eth_account import Account
from rich.console import Console
from rich.table import Table
from web3 import Web3

from marketplace.chain.deploy import Deployment, deploy, manifest_path
from marketplace.chain.errors import ChainError
from marketplace.devnet.accounts import devnet_account

ANVIL_CHAIN_ID = 31337

rpc_option = click.option(
    "--rpc-url",
    envvar="ZOO_RPC_URL",
    default="http://127.0.0.1:8545",
    show_default=True,
    help="JSON-RPC endpoint of the chain (env ZOO_RPC_URL).",
)


def connect(rpc_url: str, change: str = "set ZOO_RPC_URL") -> Web3:
    """The chain at `rpc_url`; `change` says how the command that asks lets a user point it
    elsewhere."""
    w3 = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": 30}))
    if not w3.is_connected():
        raise ChainError(
            f"no chain answers at {rpc_url}: start one (`zoo-compute devnet up` for a local one) "
            f"or {change}"
        )
    return w3


@click.group()
def chain() -> None:
    """Deploy and inspect the ledger contracts."""


@chain.command("deploy")
@rpc_option
@click.option(
    "--manifest",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the manifest [default: deployments/<chain id>.json].",
)
def deploy_command(rpc_url: str, manifest: Path | None) -> None:
    """Deploy ZEN, the treasury, staking, the market, verification and the registry.

    The deployer key comes from the environment variable ZOO_DEPLOYER_KEY; on a local Anvil
    chain (id 31337) the devnet's account 0 is used when it is unset.
    """
    w3 = connect(rpc_url, "pass --rpc-url or set ZOO_RPC_URL")
    key = os.environ.get("ZOO_DEPLOYER_KEY")
    if key:
        deployer = Account.from_key(key)
    elif w3.eth.chain_id == ANVIL_CHAIN_ID:
        deployer = devnet_account(0)
    else:
        raise ChainError("set ZOO_DEPLOYER_KEY to the deployer's private key")
    deployment = deploy(w3, deployer, manifest=manifest)
    _show(deployment, manifest or manifest_path(deployment.chain_id))


@chain.command("info")
@click.option(
    "--manifest",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="A deployment manifest written by `chain deploy`.",
)
def info_command(manifest: Path) -> None:
    """Show a deployment's chain and contract addresses."""
    _show(Deployment.load(manifest), manifest)


def _show(deployment: Deployment, path: Path) -> None:
    table = Table(
        title=f"Ledger on chain {deployment.chain_id} (from block {deployment.deploy_block})"
    )
    table.add_column("contract")
    table.add_column("address")
    for name, address in deployment.addresses.items():
        table.add_row(name, address)
    console = Console()
    console.print(table)
    console.print(f"manifest: {path}")
