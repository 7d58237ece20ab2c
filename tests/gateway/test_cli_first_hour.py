"""A user's first hour with `zoo-compute`: every refusal names options and settings that exist."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from marketplace import wallet
from marketplace.cli import main
from marketplace.config import Settings

SPEC = Path(__file__).resolve().parents[2] / "node" / "specs" / "tiny.yaml"
NOWHERE = "http://127.0.0.1:9"  # a port nothing listens on
PASSWORD = "first hour password"
KEY = "0x" + "22" * 32


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A user with a wallet, pointed at a chain that is not there, and no gateway."""
    home = tmp_path / "home"
    wallet.import_key(Settings(home=home), KEY, PASSWORD)
    return {"ZOO_HOME": str(home), "ZOO_WALLET_PASSWORD": PASSWORD, "ZOO_RPC_URL": NOWHERE, "ZOO_GATEWAY_URL": ""}


def command_of(args: list[str]) -> click.Command:
    command = main
    for name in args:
        if not isinstance(command, click.Group) or name not in command.commands:
            break
        command = command.commands[name]
    return command


def assert_names_only_what_exists(message: str, command: click.Command) -> None:
    """Every --option the message names is one of the command's, every ZOO_ setting one Settings reads."""
    options = {opt for param in command.params for opt in param.opts}
    assert set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", message)) <= options, message
    settings = {f"ZOO_{name.upper()}" for name in Settings.model_fields}
    assert set(re.findall(r"ZOO_[A-Z_]+", message)) <= settings, message


@pytest.mark.parametrize("args", [
    ["train", "--config", str(SPEC), "--max-budget", "10"],
    ["wallet", "balance"],
    ["node", "status"],
    ["node", "stake", "--amount", "1"],
    ["verifier", "status"],
])
def test_no_chain_says_how_to_point_the_command_at_one(args, env):
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: no chain answers at {NOWHERE}: ")
    assert "set ZOO_RPC_URL" in result.output
    assert_names_only_what_exists(result.output, command_of(args))


def test_chain_deploy_names_its_own_rpc_url_option():
    result = CliRunner().invoke(main, ["chain", "deploy", "--rpc-url", NOWHERE])
    assert result.exit_code == 1
    assert "--rpc-url" in result.output
    assert_names_only_what_exists(result.output, command_of(["chain", "deploy"]))


@pytest.mark.parametrize(("args", "option", "said"), [
    (["train", "--config", str(SPEC), "--max-budget", "-5"], "--max-budget", "must be more than 0 ZEN, got -5"),
    (["train", "--config", str(SPEC), "--max-budget", "0"], "--max-budget", "must be more than 0 ZEN, got 0"),
    (["train", "--config", str(SPEC), "--max-budget", "5", "--max-price", "-1"], "--max-price",
     "must be more than 0 ZEN, got -1"),
    (["train", "--config", str(SPEC), "--max-budget", "lots"], "--max-budget", "'lots' is not a number of ZEN"),
    (["train", "--config", str(SPEC), "--max-budget", "1e-19"], "--max-budget", "ZEN has 18 decimals, got 1e-19"),
    (["node", "stake", "--amount", "0"], "--amount", "must be more than 0 ZEN, got 0"),
    (["node", "start", "--cost-floor", "-2"], "--cost-floor", "must be more than 0 ZEN, got -2"),
    (["verifier", "stake", "--amount", "nan"], "--amount", "must be more than 0 ZEN, got nan"),
])
def test_a_bad_amount_names_its_option(args, option, said, env):
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 2
    assert f"Error: Invalid value for '{option}': {said}" in result.output
