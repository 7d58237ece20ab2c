"""Every parser of bytes a stranger writes, fed what hypothesis makes up: random bytes, and valid
documents with bytes flipped, cut short or fields replaced. Each either returns a value or raises
its own documented error, never anything else, and never takes long: a daemon that reads one of
these documents survives whatever is in it."""

from __future__ import annotations

import json
import zipfile
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marketplace.gateway.siwe import SiweError, SiweMessage
from marketplace.protocol.checkpoint import Checkpoint, CheckpointError
from marketplace.protocol.rank_bundle import load_rank_bundle
from marketplace.protocol.spec import SpecError, parse_spec
from marketplace.protocol.units import CHECKPOINTS, UnitFormatError
from node.benchmark import BenchmarkRejected, BenchmarkReport

TINY = (Path(__file__).parents[2] / "node/specs/tiny.yaml").read_text()
LLAMA = (Path(__file__).parents[2] / "node/specs/llama-tiny.yaml").read_text()
FAST = settings(max_examples=300, deadline=2_000, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=100, deadline=5_000, suppress_health_check=list(HealthCheck))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def mutated(document: bytes):
    """`document` with a few bytes flipped, cut short, or with random bytes spliced in."""
    return st.one_of(
        st.integers(0, len(document)).map(lambda n: document[:n]),
        st.lists(
            st.tuples(st.integers(0, len(document) - 1), st.integers(1, 255)),
            min_size=1,
            max_size=8,
        ).map(lambda flips: _flip(document, flips)),
        st.tuples(st.integers(0, len(document)), st.binary(max_size=64)).map(
            lambda cut: document[: cut[0]] + cut[1] + document[cut[0] :]
        ),
    )


def _flip(document: bytes, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(document)
    for at, mask in flips:
        out[at] ^= mask
    return bytes(out)


def replaced_leaf(tree: dict):
    """`tree` (a parsed document) with one value somewhere replaced by an arbitrary JSON value."""
    paths = list(_paths(tree))
    return st.tuples(st.sampled_from(paths), json_values).map(lambda p: _replace(tree, *p))


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield (*prefix, i)
            yield from _paths(value, (*prefix, i))


def _replace(tree, path, value):
    tree = json.loads(json.dumps(tree))
    node = tree
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return tree


# --- job specs: read by the gateway, every provider's bidder and every verifier -------------


@FAST
@given(st.text(max_size=500) | st.binary(max_size=500))
def test_any_text_is_a_spec_or_a_spec_error(text):
    try:
        parse_spec(text)
    except SpecError:
        pass


@FAST
@given(replaced_leaf(yaml.safe_load(TINY)) | replaced_leaf(yaml.safe_load(LLAMA)))
def test_a_spec_with_any_value_anywhere_is_a_spec_or_a_spec_error(tree):
    try:
        parse_spec(tree)
    except SpecError:
        pass


# --- benchmark reports: read by every verifier from any registration -------------------------

REPORT = BenchmarkReport(
    format="zoo-compute/benchmark-v1",
    size=512,
    checksum="ab" * 32,
    gflops=120.5,
    device="cpu",
    torch_version=torch.__version__,
    machine="x86_64",
)


@FAST
@given(st.binary(max_size=600) | mutated(REPORT.to_bytes()))
def test_any_bytes_are_a_report_or_rejected(data):
    try:
        report = BenchmarkReport.from_bytes(data)
    except BenchmarkRejected:
        return
    assert 0 < report.gflops <= 1e9


@FAST
@given(replaced_leaf(json.loads(REPORT.to_bytes())))
def test_a_report_with_any_value_anywhere_is_a_report_or_rejected(tree):
    try:
        BenchmarkReport.from_bytes(json.dumps(tree).encode())
    except BenchmarkRejected:
        pass


# --- checkpoints and rank bundles: read by successors, verifiers and the gateway -------------

CHECKPOINT = Checkpoint(
    {"model": {"w": torch.arange(6, dtype=torch.float32)}, "progress": {"step": 3}},
    {"metrics": {"loss": 1.5}},
).to_bytes()


@SLOW
@given(st.binary(max_size=400) | mutated(CHECKPOINT))
def test_any_bytes_are_a_checkpoint_or_a_checkpoint_error(data):
    try:
        Checkpoint.load(data)
    except CheckpointError:
        pass


@SLOW
@given(mutated(CHECKPOINT))
def test_any_bytes_are_a_rank_bundle_or_a_unit_format_error(data):
    try:
        load_rank_bundle(data)
    except UnitFormatError:
        pass


def test_a_checkpoint_smuggling_code_is_refused():
    """A torch file is a zip holding a pickle: one whose pickle calls a function (here
    os.system) is no checkpoint, and the function is never called."""
    marker = Path("/tmp/zoo-pickle-ran")
    marker.unlink(missing_ok=True)
    honest = BytesIO()
    torch.save({"format": CHECKPOINTS.tag, "state": {}, "metadata": {}}, honest)
    evil = BytesIO()
    with zipfile.ZipFile(honest) as source, zipfile.ZipFile(evil, "w") as out:
        for item in source.infolist():
            payload = source.read(item)
            if item.filename.endswith("data.pkl"):
                payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
            out.writestr(item, payload)
    with pytest.raises(CheckpointError):
        Checkpoint.load(evil.getvalue())
    assert not marker.exists()


# --- Sign-In with Ethereum messages: posted by anyone to the gateway --------------------------

SIWE = SiweMessage(
    domain="gateway.example",
    address="0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    statement="Sign in to Zoo Compute.",
    uri="https://gateway.example",
    version="1",
    chain_id=31337,
    nonce="abcdef0123456789",
    issued_at=datetime(2026, 11, 25, tzinfo=UTC),
).text()


@FAST
@given(st.text(max_size=600) | mutated(SIWE.encode()).map(lambda b: b.decode("utf-8", "replace")))
def test_any_text_is_a_sign_in_message_or_a_siwe_error(text):
    try:
        SiweMessage.parse(text)
    except SiweError:
        pass
