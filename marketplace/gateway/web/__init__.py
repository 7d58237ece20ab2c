"""The gateway's web pages: the settlement explorer and the staking page, static files over the API.

Their scripts are bundled from `src/` into `dist/` by `npm run build` (scripts/setup.sh runs it
when a source is newer than the bundle).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

WEB_DIR = Path(__file__).resolve().parent
PREFIX = "/ui"


def mount_pages(app: FastAPI) -> None:
    """Serve the pages at /ui/ (an index), /ui/explorer/ and /ui/stake/ (each folder's index.html,
    as a web server would) and their bundles at /ui/dist/. An unbuilt bundle is a 404, not a
    failed start: the pages then say how to build it."""
    app.mount(f"{PREFIX}/dist", StaticFiles(directory=WEB_DIR / "dist"), name="ui-dist")
    app.mount(PREFIX, StaticFiles(directory=WEB_DIR / "pages", html=True), name="ui")
