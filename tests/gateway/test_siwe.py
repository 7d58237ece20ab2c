"""EIP-4361 messages: the EIP's own example parses and renders back byte for byte; malformed ones
are refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from marketplace.gateway.siwe import SiweError, SiweMessage

EXAMPLE = """example.com wants you to sign in with your Ethereum account:
0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2

I accept the ExampleOrg Terms of Service: https://example.com/tos

URI: https://example.com/login
Version: 1
Chain ID: 1
Nonce: 32891756
Issued At: 2021-09-30T16:25:24Z
Resources:
- ipfs://bafybeiemxf5abjwjbikoz4mc3a3dla6ual3jsgpdr4cjr3oz3evfyavhwq/
- https://example.com/my-web2-claim.json"""


def test_the_eips_example_round_trips():
    message = SiweMessage.parse(EXAMPLE)
    assert (message.domain, message.chain_id, message.nonce) == ("example.com", 1, "32891756")
    assert message.issued_at == datetime(2021, 9, 30, 16, 25, 24, tzinfo=UTC)
    assert message.resources[1] == "https://example.com/my-web2-claim.json"
    assert message.text() == EXAMPLE
    without_statement = EXAMPLE.replace(
        "I accept the ExampleOrg Terms of Service: https://example.com/tos\n", ""
    )
    assert SiweMessage.parse(without_statement).statement is None
    assert SiweMessage.parse(without_statement).text() == without_statement


@pytest.mark.parametrize(
    "change, words",
    [
        (
            (
                "0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2",
                "0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2",
            ),
            "checksummed",
        ),
        (("Nonce: 32891756", "Nonce: 1234"), "at least 8"),
        (("Chain ID: 1", "Chain ID: one"), "not a number"),
        (("Chain ID: 1", "Chain ID: \u00b2"), "not a number"),  # str.isdigit() takes it
        (("Chain ID: 1", "Chain ID: 1" + "0" * 80), "not a number"),
        (("Issued At: 2021-09-30T16:25:24Z", "Issued At: yesterday"), "RFC 3339"),
        (("Issued At: 2021-09-30T16:25:24Z", "Issued At: 2021-09-30T16:25:24"), "time zone"),
        (("Version: 1\nChain ID: 1", "Chain ID: 1\nVersion: 1"), "unexpected line"),
        (("Nonce: 32891756\n", ""), "lacks nonce"),
        ((" wants you", " asks you"), "not a Sign-In with Ethereum message"),
    ],
)
def test_malformed_messages_are_refused_naming_why(change, words):
    with pytest.raises(SiweError, match=words):
        SiweMessage.parse(EXAMPLE.replace(*change))
