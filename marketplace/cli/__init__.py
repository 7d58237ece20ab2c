"""The `zoo-compute` command line."""

import click

from marketplace.cli.chain import chain
from marketplace.cli.devnet import devnet
from marketplace.cli.gateway import gateway
from marketplace.cli.ipfs import ipfs
from marketplace.cli.jobs import jobs
from marketplace.cli.node import node
from marketplace.cli.registry import datasets, models
from marketplace.cli.tokenizers import tokenizers
from marketplace.cli.train import train
from marketplace.cli.verifier import verifier
from marketplace.cli.wallet import wallet
from marketplace.errors import ZooError


class ZooGroup(click.Group):
    """Shows our own errors as one line, without a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ZooError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=ZooGroup)
@click.version_option(package_name="zoo-compute")
def main() -> None:
    """Zoo Compute: an open, blockchain-settled marketplace for AI training compute."""


main.add_command(chain)
main.add_command(datasets)
main.add_command(devnet)
main.add_command(gateway)
main.add_command(ipfs)
main.add_command(jobs)
main.add_command(models)
main.add_command(node)
main.add_command(tokenizers)
main.add_command(train)
main.add_command(wallet)
main.add_command(verifier)
