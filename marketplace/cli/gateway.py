"""`zoo-compute gateway`: serve the read API, and index the chain in the foreground."""

from __future__ import annotations

import logging
import signal
import threading

import click
from rich.console import Console

from marketplace.config import Settings

console = Console()
LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"])


@click.group()
def gateway() -> None:
    """The gateway: the HTTP API over the indexed ledger, and its chain indexer.

    The database is ZOO_DATABASE_URL (any SQLAlchemy URL, e.g. postgresql://...), by default
    ZOO_HOME/gateway.sqlite3. The chain is ZOO_RPC_URL with the manifest ZOO_MANIFEST, and the
    indexer waits ZOO_CONFIRMATIONS blocks. With Celery beat running the `gateway.index_step`
    schedule (marketplace.gateway.tasks), `gateway index` is not needed.
    """


@gateway.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="TCP port to listen on.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes sharing the port (about one per core).",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=LOG_LEVELS,
    help="How much the server logs.",
)
def serve_command(host: str, port: int, workers: int, log_level: str) -> None:
    """Serve the API (OpenAPI at /docs) until SIGTERM or Ctrl-C."""
    import uvicorn

    from marketplace.serving import QuietServer

    options = {
        "factory": True,
        "host": host,
        "port": port,
        "log_level": log_level.lower(),
        "access_log": log_level == "DEBUG",
    }
    if workers > 1:  # uvicorn's supervisor starts its own servers in the worker processes
        uvicorn.run("marketplace.gateway.api.main:app_from_env", workers=workers, **options)
        return
    config = uvicorn.Config("marketplace.gateway.api.main:app_from_env", **options)
    server = QuietServer(config)
    server.run()
    if not server.started:
        raise SystemExit(3)  # uvicorn's STARTUP_FAILURE, as `uvicorn.run` exits


@gateway.command("index")
@click.option(
    "--interval",
    default=None,
    type=click.FloatRange(min=0.0),
    help="Seconds between steps; default ZOO_POLL_INTERVAL.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=LOG_LEVELS,
    help="How much the indexer logs.",
)
def index_command(interval: float | None, log_level: str) -> None:
    """Follow the chain into the database in the foreground until SIGTERM or Ctrl-C.

    For setups without Celery beat. Prints a line starting "indexer ready" once it follows the
    chain.
    """
    from marketplace.gateway.indexer import open_indexer

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()
    indexer = open_indexer(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    console.print(
        f"indexer ready: {settings.rpc_url} from block {indexer.cursor.next_block}", highlight=False
    )
    indexer.run(settings.poll_interval if interval is None else interval, stop)
