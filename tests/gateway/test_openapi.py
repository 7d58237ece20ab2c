"""Schemathesis against the gateway's OpenAPI, reads and writes, on an indexed ledger: no 5xx, no
response off its schema."""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance

from marketplace.gateway.api.main import create_app

pytestmark = pytest.mark.anvil

# Examples per operation: the suite's run; `scripts/fuzz_gateway.sh` runs 200.
EXAMPLES = int(os.environ.get("ZOO_FUZZ_EXAMPLES", "30"))


@pytest.fixture
def api_schema(story, indexer, settings):
    """Every route, the writes included, on the indexed ledger, its live chain and an IPFS node."""
    while indexer.step():
        pass
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(settings))


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture(autouse=True)
def tests_counted_as_collected(request):
    """Schemathesis adds every operation it runs to the session's test count but reports them all as
    this one test, so pytest's progress would step back here and end short of 100%: keep the count
    as collected."""
    collected = request.session.testscollected
    yield
    request.session.testscollected = collected


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_keeps_its_schema(case):
    # A write's body can match its schema and still be refused (a bad signature, an unknown nonce):
    # a 400 with a message is the right answer there, not a failure.
    case.call_and_validate(
        excluded_checks=[positive_data_acceptance] if case.method == "POST" else []
    )
