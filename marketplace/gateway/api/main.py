"""The FastAPI app: one router per resource, errors as 4xx with a message."""

from __future__ import annotations

from fastapi import FastAPI

from marketplace.config import Settings
from marketplace.gateway.api import errors, rate_limits
from marketplace.gateway.api.cache import IndexCache
from marketplace.gateway.api.routes import (
    auth,
    chain,
    health,
    jobs,
    providers,
    registry,
    settlements,
    stats,
    transactions,
    treasury,
    uploads,
)
from marketplace.gateway.api.schemas import BOUNDED
from marketplace.gateway.checkpoints import PassedOver
from marketplace.gateway.connection import LedgerConnection
from marketplace.gateway.db import database_url, open_database
from marketplace.gateway.web import mount_docs, mount_pages

# A request body's bytes at most: the longest a route's fields allow, each character written as
# JSON's longest escape, fits.
MAX_BODY_BYTES = 2 * 1024 * 1024


def create_app(settings: Settings, url: str | None = None) -> FastAPI:
    """The gateway's API on the database at `url` (default: ZOO_DATABASE_URL or the home's
    SQLite)."""
    app = FastAPI(
        title="Zoo Compute gateway",
        description="Jobs, providers, settlements and network totals, as indexed from the ledger; "
        "unsigned transactions and signed-in uploads for wallets it never holds.",
        docs_url=None,
        redoc_url=None,
        max_body_size=MAX_BODY_BYTES,  # bounded before anything buffers it; uploads set their own
        responses=BOUNDED,
    )  # /docs from the gateway's own copy of Swagger UI
    app.state.settings = settings
    app.state.sessions = open_database(url or database_url(settings))
    app.state.ledger = LedgerConnection(settings)
    app.state.cache = IndexCache()
    app.state.passed_over = PassedOver()
    for module in (
        jobs,
        providers,
        registry,
        settlements,
        stats,
        health,
        chain,
        auth,
        transactions,
        uploads,
        treasury,
    ):
        app.include_router(module.router)
    mount_pages(app)
    mount_docs(app)

    errors.install(app)
    rate_limits.install(app, settings.gateway_read_limit, settings.gateway_write_limit)
    return app


def app_from_env() -> FastAPI:
    """The app of this process's ZOO_* settings: uvicorn's factory, called once in each worker
    process."""
    return create_app(Settings())
