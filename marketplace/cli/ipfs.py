"""`zoo-compute ipfs`: run the embedded IPFS node."""

import logging

import click


@click.group()
def ipfs() -> None:
    """The embedded IPFS node (Kubo RPC subset and trustless gateway)."""


@ipfs.command()
@click.option(
    "--repo",
    "repo_path",
    required=True,
    envvar="ZOO_IPFS_REPO",
    type=click.Path(file_okay=False),
    show_envvar=True,
    help="Folder for blocks, pins and the node's identity; created if missing.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; keep it on loopback unless the port is protected.",
)
@click.option(
    "--port",
    default=5001,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port for the RPC API (/api/v0) and gateway (/ipfs); 0 picks a free one.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="How much the node logs.",
)
def serve(repo_path: str, host: str, port: int, log_level: str) -> None:
    """Serve until SIGINT/SIGTERM. Ready once <repo>/api holds the listening multiaddr."""
    # Imported here so `zoo-compute --help` does not pay for loading the web stack.
    from marketplace.ipfs.server import serve as run_server

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        run_server(host, port, repo_path)
    except OSError as exc:
        raise click.ClickException(
            f"cannot start the node on {host}:{port} with repo {repo_path}: {exc.strerror or exc}"
        ) from None
