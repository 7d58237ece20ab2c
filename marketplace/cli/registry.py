"""`zoo-compute models` and `zoo-compute datasets`: push, pull, list and show registry versions.

Both talk to the chain at ZOO_RPC_URL (its manifest from ZOO_MANIFEST) and to IPFS at
ZOO_IPFS_API; `push` signs with the wallet (ZOO_WALLET)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from marketplace import catalog
from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import Ledger
from marketplace.chain.registry import Reference, Registry, Version, check_name
from marketplace.cli.chain import connect
from marketplace.config import Settings
from marketplace.licenses import spdx_id
from marketplace.protocol.terms import JobStatus, Kind
from marketplace.storage import Storage
from marketplace.wallet import load_account

JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


class ReferenceType(click.ParamType):
    """`org/name` or `org/name@N` on the command line."""

    name = "org/name[@N]"

    def convert(self, value, param, ctx) -> Reference:
        if isinstance(value, Reference):
            return value
        try:
            return Reference.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


REFERENCE = ReferenceType()


def open_registry(settings: Settings) -> Registry:
    w3 = connect(settings.rpc_url)
    return Registry(w3, settings.deployment(w3.eth.chain_id))


def check_job(ledger: Ledger, job_id: int) -> None:
    """A version names a job of this ledger's market, or none: a typo here would be lineage
    forever."""
    if ledger.job_status(job_id) == JobStatus.NONE:
        raise ChainError(f"there is no job {job_id} on this chain's market")


def _when(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _say_version(verb: str, version: Version) -> str:
    lineage = f", from {version.parent}" if version.parent else ""
    job = f", made by job {version.job_id}" if version.job_id else ""
    return (
        f"{verb} {version.kind.label} {version.reference}: {version.cid} "
        f"({version.license}{lineage}{job})"
    )


def registry_group(kind: Kind, what: str, path_help: str) -> click.Group:
    """The commands of one namespace; models and datasets differ only in what a version holds."""

    @click.group(name=f"{kind.label}s", help=f"{what} published on the ledger's registry.")
    def group() -> None:
        pass

    @group.command("push")
    @click.argument("path", type=click.Path(exists=True, path_type=Path))
    @click.option("--name", required=True, help="The name to publish under: org/name.")
    @click.option(
        "--license", "license_id", required=True, help="The SPDX license id, e.g. Apache-2.0."
    )
    @click.option(
        "--parent",
        type=REFERENCE,
        help=f"The {kind.label} version this one derives from: org/name@N (org/name: its newest).",
    )
    @click.option("--job", "job_id", type=click.IntRange(min=1), help="The job that made it.")
    @click.option(
        "--metadata",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="A file of metadata (a card, statistics) stored by CID with the version.",
    )
    def push(
        path: Path,
        name: str,
        license_id: str,
        parent: Reference | None,
        job_id: int | None,
        metadata: Path | None,
    ) -> None:
        # Checked before the wallet is unlocked: no password is asked for a push that would fail.
        check_name(name)
        spdx_id(license_id)
        settings = Settings()
        registry = open_registry(settings)
        if job_id is not None:
            check_job(Ledger(registry.w3, settings.deployment(registry.w3.eth.chain_id)), job_id)
        account = load_account(settings)
        with Storage() as storage:
            version = catalog.push(
                registry,
                storage,
                account,
                kind,
                path,
                name,
                license_id,
                parent=parent,
                job_id=job_id,
                metadata=metadata,
            )
        click.echo(_say_version("published", version))

    push.help = f"Publish {path_help} as the next version of --name (yours once you publish it)."

    @group.command("pull")
    @click.argument("ref", type=REFERENCE)
    @click.option(
        "--out",
        required=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="The folder to fetch into; it must not exist or be empty.",
    )
    def pull(ref: Reference, out: Path) -> None:
        """Fetch a version (org/name@N, or org/name for the newest) into a folder, every file
        checked against its CID."""
        settings = Settings()
        version = open_registry(settings).resolve(kind, ref)
        with Storage() as storage:
            listing = catalog.pull(storage, version, out)
        click.echo(
            f"pulled {kind.label} {version.reference}: {len(listing.files)} files, "
            f"{listing.size:,} bytes into {out}"
        )

    @group.command("list")
    @JSON
    def list_command(as_json: bool) -> None:
        """Every name with its newest version."""
        registry = open_registry(Settings())
        newest = [registry.resolve(kind, Reference(n)) for n in registry.names(kind)]
        if as_json:
            click.echo(json.dumps([v.as_json() for v in newest]))
            return
        table = Table(title=f"{what} ({len(newest)})")
        for column in ("name", "newest", "license", "owner", "published"):
            table.add_column(column)
        for v in newest:
            owner = registry.owner_of(kind, v.name) or "-"
            table.add_row(v.name, str(v.number), v.license, owner, _when(v.published_at))
        Console().print(table)

    @group.command("show")
    @click.argument("name")
    @JSON
    def show(name: str, as_json: bool) -> None:
        """Every version of a name, with its lineage."""
        registry = open_registry(Settings())
        ref = Reference.parse(name)
        versions = registry.versions(kind, ref.name)
        if not versions:
            registry.resolve(kind, ref)  # the contract's UnknownName, as a sentence
        if as_json:
            click.echo(json.dumps([v.as_json() for v in versions]))
            return
        owner = registry.owner_of(kind, ref.name)
        table = Table(title=f"{kind.label} {ref.name}, owned by {owner}")
        for column in ("version", "cid", "license", "parent", "job", "publisher", "published"):
            table.add_column(column)
        for v in versions:
            table.add_row(
                str(v.number),
                v.cid,
                v.license,
                str(v.parent or "-"),
                str(v.job_id or "-"),
                v.publisher,
                _when(v.published_at),
            )
        Console().print(table)

    return group


models = registry_group(
    Kind.MODEL,
    "Models",
    "a Hugging Face model folder (config.json, model.safetensors, tokenizer files)",
)
datasets = registry_group(Kind.DATASET, "Datasets", "a data file or a folder of shards")
