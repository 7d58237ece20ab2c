"""The gateway's web pages: the settlement explorer, the staking page and the API reference, static
files over the API.

The pages' scripts are bundled from `src/` into `dist/` by `npm run build`, which also copies
Swagger UI there from its pinned npm package, so /docs works with no other site reachable
(scripts/setup.sh runs the build when a source is newer than it).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

WEB_DIR = Path(__file__).resolve().parent
PREFIX = "/ui"
HOME = f"{PREFIX}/explorer/"
SWAGGER_UI = "swagger-ui"  # dist/swagger-ui/, from the npm package swagger-ui-dist


def mount_pages(app: FastAPI) -> None:
    """Serve the pages at /ui/ (an index), /ui/explorer/ and /ui/stake/ (each folder's index.html,
    as a web server would) and their bundles at /ui/dist/; `/` leads to the explorer. An unbuilt
    bundle is a 404, not a failed start: the pages then say how to build it."""
    app.mount(f"{PREFIX}/dist", StaticFiles(directory=WEB_DIR / "dist"), name="ui-dist")
    app.mount(PREFIX, StaticFiles(directory=WEB_DIR / "pages", html=True), name="ui")

    @app.get("/", include_in_schema=False)
    def home(request: Request) -> RedirectResponse:
        return RedirectResponse(request.scope.get("root_path", "") + HOME)


def mount_docs(app: FastAPI, path: str = "/docs") -> None:
    """Swagger UI for the app's OpenAPI at `path`, from the gateway's own copy of its script and
    stylesheet (FastAPI's default page loads them from a CDN: blank offline). Create the app with
    `docs_url=None` (and `redoc_url=None`: ReDoc would load its script and fonts from other
    sites)."""
    assets = f"{PREFIX}/dist/{SWAGGER_UI}"

    @app.get(path, include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        openapi_url = root + app.openapi_url
        if not (WEB_DIR / "dist" / SWAGGER_UI / "swagger-ui-bundle.js").is_file():
            return HTMLResponse(
                "<!doctype html><title>API reference not built</title>"
                "<p>Swagger UI is not built: run "
                "<code>npm run build</code> (or <code>bash scripts/setup.sh</code>) and reload. "
                f'The OpenAPI document is at <a href="{openapi_url}">{openapi_url}</a>.</p>',
                status_code=503,
            )
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} — API reference",
            swagger_js_url=f"{root}{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{assets}/swagger-ui.css",
            swagger_favicon_url=f"{root}{assets}/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},
        )  # no badge from validator.swagger.io
