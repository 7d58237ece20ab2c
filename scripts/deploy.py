"""Deploy the ledger from Ape: `ape run deploy --network ethereum:local:foundry` (or any network).

Ape picks the network and provider; the deployment itself is `marketplace.chain.deploy.deploy`,
the same function the devnet and the tests use. The deployer is Ape's first test account on a
local network, otherwise the key in ZOO_DEPLOYER_KEY.
"""

import os

import click
from ape import accounts
from ape.cli import ConnectedProviderCommand
from eth_account import Account

from marketplace.chain.deploy import deploy, manifest_path


@click.command(cls=ConnectedProviderCommand)
@click.option("--manifest", type=click.Path(dir_okay=False), help="Where to write the manifest.")
@click.option(
    "--proposer",
    help="Who may propose governance calls to the timelock (a multisig); default: the deployer.",
)
def cli(provider, manifest, proposer):
    key = os.environ.get("ZOO_DEPLOYER_KEY")
    if key:
        deployer = Account.from_key(key)
    elif provider.network.name == "local":
        deployer = Account.from_key(accounts.test_accounts[0].private_key)
    else:
        raise click.ClickException("set ZOO_DEPLOYER_KEY to the deployer's private key")
    deployment = deploy(provider.web3, deployer, proposer=proposer, manifest=manifest)
    for name, address in deployment.addresses.items():
        click.echo(f"{name:<13} {address}")
    click.echo(f"manifest: {manifest or manifest_path(deployment.chain_id)}")
