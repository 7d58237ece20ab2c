"""`zoo-compute models` and `datasets` against a real chain and IPFS node: a pushed Hugging Face
model is pulled back into a folder `transformers` loads, and each refusal is one line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from marketplace.cli import main
from marketplace.devnet.accounts import devnet_account


def zoo(env: dict[str, str], *args: str):
    return CliRunner().invoke(main, list(args), env=env)


def ok(env: dict[str, str], *args: str) -> str:
    result = zoo(env, *args)
    assert result.exit_code == 0, result.output
    return result.output


def refused(env: dict[str, str], *args: str) -> str:
    """The one line a refused command prints."""
    result = zoo(env, *args)
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def test_a_pushed_model_pulls_back_into_transformers_with_its_lineage(
    cli_env, tiny_model, job_id, tmp_path
):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    said = ok(cli_env, "models", "push", str(tiny_model), "--name", "acme/tiny", "--license", "mit")
    assert said.startswith("published model acme/tiny@1: ") and "(MIT)" in said

    card = tmp_path / "card.md"
    card.write_text("# tiny\nA fine-tune.\n")
    said = ok(
        cli_env,
        *("models", "push", str(tiny_model), "--name", "acme/tiny-chat", "--license", "Apache-2.0"),
        *("--parent", "acme/tiny@1", "--job", str(job_id), "--metadata", str(card)),
    )
    assert f"from acme/tiny@1, made by job {job_id}" in said

    out = tmp_path / "pulled"
    said = ok(cli_env, "models", "pull", "acme/tiny-chat", "--out", str(out))
    assert said.startswith("pulled model acme/tiny-chat@1: ")
    pulled = AutoModelForCausalLM.from_pretrained(out)
    original = AutoModelForCausalLM.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = tokenizer("the registry names models", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(pulled(ids).logits, original(ids).logits)

    [chat] = json.loads(ok(cli_env, "models", "show", "acme/tiny-chat", "--json"))
    assert (
        chat["parent"] == "acme/tiny@1"
        and chat["job_id"] == job_id
        and chat["license"] == "Apache-2.0"
    )
    assert chat["publisher"] == devnet_account(1).address and chat["metadata_cid"]
    listed = json.loads(ok(cli_env, "models", "list", "--json"))
    assert [(v["name"], v["version"]) for v in listed] == [("acme/tiny", 1), ("acme/tiny-chat", 1)]
    assert "acme/tiny-chat" in ok(cli_env, "models", "list")


def test_each_refusal_is_one_clean_line(cli_env, keystores, tiny_model, tmp_path):
    push = ("models", "push", str(tiny_model), "--name")
    assert "'llama3' is not an SPDX license id" in refused(
        cli_env, *push, "acme/tiny", "--license", "llama3"
    )
    assert "is not org/name" in refused(cli_env, *push, "Acme/Tiny", "--license", "MIT")
    ok(cli_env, *push, "acme/tiny", "--license", "MIT")
    as_bob = cli_env | {"ZOO_WALLET": str(keystores["bob"])}
    line = refused(as_bob, *push, "acme/tiny", "--license", "MIT")
    assert f"model acme/tiny belongs to {devnet_account(1).address}, not to" in line
    assert "acme/tiny has no version 9" in refused(
        cli_env, "models", "pull", "acme/tiny@9", "--out", str(tmp_path / "x")
    )
    assert "acme/none has no published version" in refused(cli_env, "models", "show", "acme/none")
    assert "acme/none has no version 1" in refused(
        cli_env, *push, "acme/next", "--license", "MIT", "--parent", "acme/none@1"
    )
    assert "there is no job 99 on this chain's market" in refused(
        cli_env, *push, "acme/next", "--license", "MIT", "--job", "99"
    )
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text("{}")
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04")
    assert "holds pickled files (pytorch_model.bin)" in refused(
        cli_env, "models", "push", str(pickled), "--name", "acme/pickled", "--license", "MIT"
    )


def test_datasets_push_pull_and_list(cli_env, tmp_path):
    shards = tmp_path / "corpus"
    shards.mkdir()
    for i in range(2):
        (shards / f"part-{i}.jsonl").write_text(json.dumps({"text": f"line {i}"}) + "\n")
    said = ok(
        cli_env, "datasets", "push", str(shards), "--name", "acme/corpus", "--license", "CC0-1.0"
    )
    assert said.startswith("published dataset acme/corpus@1: ")
    ok(cli_env, "datasets", "pull", "acme/corpus@1", "--out", str(tmp_path / "back"))
    for i in range(2):
        name = f"part-{i}.jsonl"
        assert (tmp_path / "back" / name).read_text() == (shards / name).read_text()
    [listed] = json.loads(ok(cli_env, "datasets", "list", "--json"))
    assert (listed["name"], listed["license"], listed["kind"]) == (
        "acme/corpus",
        "CC0-1.0",
        "dataset",
    )
    assert json.loads(ok(cli_env, "models", "list", "--json")) == []
