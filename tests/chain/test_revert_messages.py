"""Every custom error the ledger can raise reads as a sentence, the same in the CLI, the gateway and
the web pages."""

from __future__ import annotations

import json
import subprocess

import pytest
from eth_abi import encode
from eth_utils import function_signature_to_4byte_selector, to_checksum_address

from marketplace.chain.compile import all_abis
from marketplace.chain.deploy import ZEN
from marketplace.chain.errors import _PLACEHOLDER, _abi_type, _revert_table, decode_revert, sentence
from marketplace.chain.toolchain import PROJECT_ROOT
from marketplace.protocol.terms import JobStatus

SAMPLE = {
    "address": to_checksum_address("0x" + "ab" * 20),  # viem hands the page checksummed addresses
    "bytes32": b"\x01" * 32,
    "string": "x",
    "bool": True,
}


def ledger_errors() -> dict[str, dict]:
    return {
        item["name"]: item for abi in all_abis().values() for item in abi if item["type"] == "error"
    }


def sample_args(error: dict) -> dict[str, object]:
    return {p["name"]: SAMPLE.get(p["type"], 3) for p in error["inputs"]}


@pytest.mark.parametrize("name", sorted(ledger_errors()))
def test_every_ledger_error_has_a_sentence_naming_only_its_own_arguments(name):
    error = ledger_errors()[name]
    template = _revert_table()["messages"].get(name)
    assert template, f"{name} has no sentence in marketplace/chain/revert_messages.json"
    inputs = {p["name"] for p in error["inputs"]}
    assert {m[1] for m in _PLACEHOLDER.finditer(template)} <= inputs
    text = sentence(name, sample_args(error))
    assert name not in text and "{" not in text and text.endswith((".", ":", "!")), text


def test_the_table_names_no_error_the_ledger_lacks_and_the_job_statuses_in_order():
    assert set(_revert_table()["messages"]) == set(ledger_errors())
    assert _revert_table()["enums"]["status"] == [s.name.lower() for s in sorted(JobStatus)]


def test_a_revert_decodes_to_its_sentence_with_exact_zen():
    item = ledger_errors()["InsufficientFreeStake"]
    types = [_abi_type(p) for p in item["inputs"]]
    data = function_signature_to_4byte_selector(
        f"InsufficientFreeStake({','.join(types)})"
    ) + encode(types, ["0x" + "ab" * 20, 3_999_999_999_999_999, 1_000_000 * ZEN])
    revert = decode_revert(data)
    assert revert.name == "InsufficientFreeStake"
    assert str(revert) == (
        "Only 0.003999999999999999 ZEN of your stake is free (the rest is locked as collateral "
        "for running jobs); you asked for 1,000,000 ZEN."
    )
    assert (
        sentence("WrongJobStatus", {"jobId": 1, "status": JobStatus.SETTLED})
        == "Job 1 is settled, which does not allow this."
    )


def test_the_web_pages_say_the_same_sentences(tmp_path):
    """The staking page's explain() reads the same table: bundle it and compare, error by error."""
    errors = ledger_errors()
    cases = [
        (name, [str(v) if isinstance(v, int) else v for v in sample_args(e).values()], e["inputs"])
        for name, e in errors.items()
        if ":time}" not in _revert_table()["messages"][name]
        and all(p["type"] not in ("bytes32", "bool") for p in e["inputs"])
    ]
    script = tmp_path / "say.js"
    script.write_text(
        f'import {{ sentence }} from "{PROJECT_ROOT}'
        '/marketplace/gateway/web/src/lib/wallet-errors.js";\n'
        f"const cases = {json.dumps(cases)};\n"
        "console.log(JSON.stringify(cases.map(([n, a, i]) =>"
        " sentence(n, a.map((v) => /^\\d+$/.test(v) ? BigInt(v) : v), i))));\n"
    )
    bundle = tmp_path / "say.mjs"
    subprocess.run(
        [
            PROJECT_ROOT / "node_modules/.bin/esbuild",
            script,
            "--bundle",
            "--platform=node",
            "--format=esm",
            f"--outfile={bundle}",
            "--log-level=warning",
        ],
        check=True,
        cwd=PROJECT_ROOT,
    )
    said = json.loads(
        subprocess.run(["node", bundle], check=True, capture_output=True, text=True).stdout
    )
    assert said == [sentence(name, sample_args(errors[name])) for name, _, _ in cases]
