"""Schemathesis against the gateway's OpenAPI, on an indexed ledger: no 5xx, no response off its schema."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from marketplace.config import Settings
from marketplace.gateway.api.main import create_app

pytestmark = pytest.mark.anvil


@pytest.fixture
def api_schema(ledger, story, indexer, tmp_path):
    while indexer.step():
        pass
    chain = {"rpc_url": ledger.w3.provider.endpoint_uri, "manifest": ledger.deployment.write(tmp_path / "manifest.json")}
    app = create_app(Settings(home=tmp_path, **chain), f"sqlite:///{tmp_path / 'gateway.sqlite3'}")
    return schemathesis.openapi.from_asgi("/openapi.json", app)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_keeps_its_schema(case):
    case.call_and_validate()
