"""A user's first hour with `zoo-compute`: every refusal names options and settings that exist."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from test_writes import bearer

from marketplace import wallet
from marketplace.cli import main
from marketplace.config import Settings
from marketplace.devnet.network import Devnet, State, write_env_file
from marketplace.devnet.process import Service
from marketplace.sdk.joblog import JobLog
from node.engine import SpecError, parse_spec

SPEC = Path(__file__).resolve().parents[2] / "node" / "specs" / "tiny.yaml"
NOWHERE = "http://127.0.0.1:9"  # a port nothing listens on
PASSWORD = "first hour password"
KEY = "0x" + "22" * 32


@pytest.fixture(autouse=True)
def no_devnet(monkeypatch, tmp_path):
    """A devnet running from this checkout must not lend these tests its user's settings."""
    monkeypatch.setitem(Settings.model_config, "env_file", tmp_path / "no-devnet" / "user.env")


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A user with a wallet, pointed at a chain that is not there, and no gateway."""
    home = tmp_path / "home"
    wallet.import_key(Settings(home=home), KEY, PASSWORD)
    return {
        "ZOO_HOME": str(home),
        "ZOO_WALLET_PASSWORD": PASSWORD,
        "ZOO_RPC_URL": NOWHERE,
        "ZOO_GATEWAY_URL": "",
    }


def command_of(args: list[str]) -> click.Command:
    command = main
    for name in args:
        if not isinstance(command, click.Group) or name not in command.commands:
            break
        command = command.commands[name]
    return command


def assert_names_only_what_exists(message: str, command: click.Command) -> None:
    """Every --option the message names is one of the command's, every ZOO_ setting one Settings
    reads."""
    options = {opt for param in command.params for opt in param.opts}
    assert set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", message)) <= options, message
    settings = {f"ZOO_{name.upper()}" for name in Settings.model_fields}
    assert set(re.findall(r"ZOO_[A-Z_]+", message)) <= settings, message


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--config", str(SPEC), "--max-budget", "10"],
        ["wallet", "balance"],
        ["node", "status"],
        ["node", "stake", "--amount", "1"],
        ["verifier", "status"],
    ],
)
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


@pytest.mark.parametrize(
    ("args", "option", "said"),
    [
        (
            ["train", "--config", str(SPEC), "--max-budget", "-5"],
            "--max-budget",
            "must be more than 0 ZEN, got -5",
        ),
        (
            ["train", "--config", str(SPEC), "--max-budget", "0"],
            "--max-budget",
            "must be more than 0 ZEN, got 0",
        ),
        (
            ["train", "--config", str(SPEC), "--max-budget", "5", "--max-price", "-1"],
            "--max-price",
            "must be more than 0 ZEN, got -1",
        ),
        (
            ["train", "--config", str(SPEC), "--max-budget", "lots"],
            "--max-budget",
            "'lots' is not a number of ZEN",
        ),
        (
            ["train", "--config", str(SPEC), "--max-budget", "1e-19"],
            "--max-budget",
            "ZEN has 18 decimals, got 1e-19",
        ),
        (["node", "stake", "--amount", "0"], "--amount", "must be more than 0 ZEN, got 0"),
        (
            ["node", "start", "--cost-floor", "-2"],
            "--cost-floor",
            "must be more than 0 ZEN, got -2",
        ),
        (["verifier", "stake", "--amount", "nan"], "--amount", "must be more than 0 ZEN, got nan"),
    ],
)
def test_a_bad_amount_names_its_option(args, option, said, env):
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 2
    assert f"Error: Invalid value for '{option}': {said}" in result.output


def devnet_user_env(root: Path, rpc_url: str, manifest: Path) -> Path:
    """The user.env `devnet up` writes for a devnet under `root` (a space in it, as a home folder
    may have)."""
    state = State(
        root=root,
        rpc_url=rpc_url,
        manifest=str(manifest),
        redis_url="redis://127.0.0.1:9/0",
        ipfs={
            "user": "/ip4/127.0.0.1/tcp/9/http",
            "provider-0": "/ip4/127.0.0.1/tcp/10/http",
            "provider-1": "/ip4/127.0.0.1/tcp/11/http",
        },
    )
    root.mkdir(parents=True, exist_ok=True)
    (root / "password").write_text(PASSWORD)
    devnet = Devnet(root)
    write_env_file(root / "user.env", devnet._variables(state, "user"))
    return root / "user.env"


@pytest.fixture
def clean_environment(monkeypatch):
    """No ZOO_* variable from whoever runs the tests."""
    for name in [name for name in os.environ if name.startswith("ZOO_")]:
        monkeypatch.delenv(name)


@pytest.mark.usefixtures("clean_environment")
def test_a_shell_sources_the_devnet_user_env_to_the_values_the_cli_reads(tmp_path, monkeypatch):
    path = devnet_user_env(tmp_path / "dev net", NOWHERE, tmp_path / "dev net" / "deployment.json")
    shell = subprocess.run(
        ["bash", "-c", f"set -a; . {shlex.quote(str(path))} && env -0"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    )
    exported = dict(
        line.split("=", 1) for line in shell.stdout.split("\0") if line.startswith("ZOO_")
    )
    assert json.loads(exported["ZOO_IPFS_REPLICAS"]) == [
        "/ip4/127.0.0.1/tcp/10/http",
        "/ip4/127.0.0.1/tcp/11/http",
    ]
    assert exported["ZOO_HOME"] == str(tmp_path / "dev net" / "user")

    from_file = Settings(_env_file=path)
    for name, value in exported.items():
        monkeypatch.setenv(name, value)
    assert Settings(_env_file=None) == from_file
    assert (
        from_file.rpc_url == NOWHERE
        and from_file.wallet_password_file == tmp_path / "dev net" / "password"
    )


@pytest.mark.usefixtures("clean_environment")
def test_every_command_finds_the_devnet_users_wallet(ledger, tmp_path, monkeypatch):
    root = tmp_path / "devnet"
    path = devnet_user_env(
        root, ledger.w3.provider.endpoint_uri, ledger.deployment.write(tmp_path / "31337.json")
    )
    account, _ = wallet.import_key(Settings(_env_file=path), KEY, PASSWORD)
    monkeypatch.setitem(
        Settings.model_config, "env_file", path
    )  # as when the devnet runs from this checkout
    runner = CliRunner()

    assert runner.invoke(main, ["wallet", "address"]).output.strip() == account.address
    for args in (["wallet", "balance"], ["node", "status"], ["verifier", "status"]):
        shown = runner.invoke(main, args)
        assert shown.exit_code == 0, shown.output
        assert account.address in "".join(
            shown.output.split()
        )  # rich may wrap it in a table's title
    trained = runner.invoke(main, ["train", "--config", str(SPEC), "--max-budget", "0.001"])
    assert "below the reserve" in trained.output  # signed in as the same wallet, on the same chain


def devnet_state(root: Path, pid: int) -> None:
    """A devnet's state file whose only process has `pid`."""
    state = State(
        root=root,
        rpc_url=NOWHERE,
        gateway_url="http://127.0.0.1:10",
        redis_url="redis://127.0.0.1:11/0",
        ipfs={"user": "/ip4/127.0.0.1/tcp/12/http"},
    )
    state.services = [Service("anvil", ["anvil"], str(root / "logs" / "anvil.log"), pid=pid)]
    state.save()


def test_devnet_status_after_down_says_none_runs_instead_of_stale_urls(tmp_path):
    root = tmp_path / "devnet"
    root.mkdir()
    devnet_state(root, os.getpid())  # a process that runs: this one
    shown = CliRunner().invoke(main, ["devnet", "status", "--root", str(root)])
    assert shown.exit_code == 0, shown.output
    assert f"chain: {NOWHERE} (not answering)" in shown.output and "{}" not in shown.output

    devnet_state(
        root, 2**22 + 1
    )  # above the kernel's pid range: everything `up` started has stopped
    (root / "user.env").write_text(f"ZOO_RPC_URL='{NOWHERE}'\n")
    assert CliRunner().invoke(main, ["devnet", "down", "--root", str(root)]).exit_code == 0
    assert not (root / "user.env").exists()
    for args in ([], ["--json"]):
        shown = CliRunner().invoke(main, ["devnet", "status", "--root", str(root), *args])
        assert shown.exit_code == 1
        assert shown.output.startswith(
            f"Error: no devnet is running in {root}: start one with `zoo-compute devnet up`"
        )
        assert NOWHERE not in shown.output and "127.0.0.1:10" not in shown.output


def test_broken_yaml_is_shown_at_its_line_by_train_and_the_gateway(client, cast, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC.read_text().replace("lr: ", "lr: 0.1: ", 1))
    line = next(i for i, text in enumerate(spec.read_text().splitlines()) if "lr: 0.1: " in text)
    with pytest.raises(SpecError) as caught:
        parse_spec(spec.read_text())
    problem = str(caught.value)
    assert problem.startswith(f"line {line + 1}, column ") and "\n" in problem

    trained = CliRunner().invoke(main, ["train", "--config", str(spec), "--max-budget", "10"])
    assert trained.exit_code == 1 and "Traceback" not in trained.output
    assert trained.output == f"Error: invalid job spec {spec}: {problem}\n"

    refused = client.post(
        "/uploads/spec", json={"spec": spec.read_text()}, headers=bearer(client, cast.user)
    )
    assert refused.status_code == 400 and refused.json()["detail"] == f"invalid job spec: {problem}"


def test_jobs_logs_says_why_a_log_is_empty_then_shows_what_a_provider_posted(
    served_gateway, story, cast
):
    runner = CliRunner(mix_stderr=False)
    args = ["jobs", "--gateway", served_gateway, "logs", str(story.job_id)]
    empty = runner.invoke(main, args)
    assert empty.exit_code == 0 and empty.stdout == ""
    assert empty.stderr.startswith(
        f"job {story.job_id} has no log lines: none of its providers posted any ("
    )

    provider = next(p for p in cast.providers if p.address == story.winners[0])
    job_log = JobLog(served_gateway, provider)
    job_log.post(story.job_id, "slot 0 unit 0: committed")
    job_log.close()
    shown = runner.invoke(main, args)
    assert (shown.exit_code, shown.stdout, shown.stderr) == (
        0,
        f"{provider.address[:10]}  slot 0 unit 0: committed\n",
        "",
    )


def test_jobs_logs_shows_a_hostile_gateways_escape_sequences_as_text():
    """A gateway (or anyone on its plain-http path) that hands back a line carrying terminal
    escape sequences does not get to clear the user's screen or retitle the terminal."""
    hostile = {"id": 1, "author": "0x\x1b]0;pwned\x07", "posted_at": 0, "line": "ok\x1b[2J\x9b"}

    class Gateway(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps([] if "since=1" in self.path else [hostile]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        shown = CliRunner(mix_stderr=False).invoke(main, ["jobs", "--gateway", url, "logs", "7"])
    finally:
        server.shutdown()
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == "0x\\x1b]0;pwne  ok\\x1b[2J\\x9b\n"
    assert not any(c in shown.stdout for c in "\x1b\x07\x9b")
