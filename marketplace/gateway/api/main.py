"""The FastAPI app: one router per resource, errors as 4xx with a message."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from marketplace.config import Settings
from marketplace.gateway.api.routes import chain, health, jobs, providers, settlements, stats
from marketplace.gateway.api.service import NotFound
from marketplace.gateway.db import database_url, open_database
from marketplace.gateway.web import mount_pages


def create_app(settings: Settings, url: str | None = None) -> FastAPI:
    """The gateway's API on the database at `url` (default: ZOO_DATABASE_URL or the home's SQLite)."""
    app = FastAPI(title="Zoo Compute gateway",
                  description="Jobs, providers, settlements and network totals, as indexed from the ledger.")
    app.state.settings = settings
    app.state.sessions = open_database(url or database_url(settings))
    for module in (jobs, providers, settlements, stats, health, chain):
        app.include_router(module.router)
    mount_pages(app)

    @app.exception_handler(NotFound)
    def not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    return app
