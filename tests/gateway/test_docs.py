"""The gateway's front door and API reference: `/` leads to the explorer, and /docs needs no other
site."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient

from marketplace.config import Settings
from marketplace.gateway.api.main import create_app


class Assets(HTMLParser):
    """The URLs a page loads by itself: scripts, stylesheets, icons."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and attrs.get("src"):
            self.urls.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            self.urls.append(attrs["href"])
        if tag == "img" and attrs.get("src"):
            self.urls.append(attrs["src"])


@pytest.fixture
def client(tmp_path) -> TestClient:
    # No chain or IPFS node: neither page reads them.
    return TestClient(
        create_app(
            Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'gateway.sqlite3'}")
        )
    )


def test_root_leads_to_the_explorer(client):
    response = client.get("/", follow_redirects=False)
    assert response.is_redirect and response.headers["location"] == "/ui/explorer/"
    page = client.get("/")
    assert (
        page.status_code == 200 and "<title>Zoo Compute — settlement explorer</title>" in page.text
    )


def test_docs_loads_only_the_gateways_own_assets(client):
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    parser = Assets()
    parser.feed(page.text)
    types = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
    assert sorted(url.rsplit(".", 1)[1] for url in parser.urls) == ["css", "js", "png"]
    for url in parser.urls:
        assert url.startswith("/") and not url.startswith("//"), f"{url} is not on the gateway"
        asset = client.get(url)
        assert asset.status_code == 200 and len(asset.content) > 0, url
        assert asset.headers["content-type"].startswith(types["." + url.rsplit(".", 1)[1]]), url
    # Swagger UI reads the OpenAPI document from the gateway, and asks no validator elsewhere.
    assert re.findall(r"url: '([^']*)'", page.text) == ["/openapi.json"]
    assert '"validatorUrl": null' in page.text
    assert "http://" not in page.text and "https://" not in page.text
    assert client.get("/openapi.json").json()["info"]["title"] == "Zoo Compute gateway"


def test_docs_are_not_part_of_the_api(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert "/" not in paths and "/docs" not in paths
    assert (
        client.get("/redoc").status_code == 404
    )  # ReDoc would load its script and fonts from other sites
