"""The Python terms of the ledger match the contracts' enums member for member, in order.

The ABI carries an enum only as uint8, so the member names are read from the Solidity source.
"""

from __future__ import annotations

import re

import pytest

from marketplace.chain.deploy import TIERS
from marketplace.chain.errors import _revert_table
from marketplace.chain.toolchain import PROJECT_ROOT
from marketplace.protocol import terms

ENUM = re.compile(r"\benum\s+(\w+)\s*\{([^}]*)\}")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
MIRRORED = (
    terms.JobStatus,
    terms.ParticipantState,
    terms.Role,
    terms.SlashReason,
    terms.Verdict,
    terms.Kind,
)


def solidity_enums() -> dict[str, list[str]]:
    """Every enum declared in contracts/interfaces, by name, with its members in order."""
    enums = {}
    for source in sorted((PROJECT_ROOT / "contracts" / "interfaces").glob("*.sol")):
        for name, body in ENUM.findall(COMMENT.sub("", source.read_text())):
            assert name not in enums, f"enum {name} is declared twice"
            enums[name] = [member.strip() for member in body.split(",") if member.strip()]
    return enums


def test_every_enum_of_the_interfaces_has_its_python_term():
    assert set(solidity_enums()) == {term.__name__ for term in MIRRORED}


@pytest.mark.parametrize("term", MIRRORED, ids=lambda term: term.__name__)
def test_a_term_matches_its_solidity_enum_in_order(term):
    assert [member.contract_name for member in term] == solidity_enums()[term.__name__]
    assert [int(member) for member in term] == list(range(len(term)))


def test_the_deployed_tier_table_is_keyed_by_the_tier_ids():
    assert [tier.name.lower() for tier in TIERS] == list(terms.Tier.labels())
    assert [int(tier) for tier in terms.Tier] == list(range(len(TIERS)))


def test_the_error_sentences_name_statuses_and_tiers_as_the_terms_do():
    """The table is shared with the web pages, which import it as is; so it keeps its own copy,
    checked here."""
    assert _revert_table()["enums"] == {
        "status": list(terms.JobStatus.labels()),
        "tier": list(terms.Tier.labels()),
    }


def test_a_label_names_its_member():
    assert terms.Tier.named("silver") is terms.Tier.SILVER
    assert terms.SlashReason.INCORRECT_COMPUTATION.contract_name == "IncorrectComputation"
    with pytest.raises(KeyError):
        terms.Tier.named("platinum")
