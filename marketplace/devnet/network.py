"""`devnet up|down|status`: Anvil, the ledger, IPFS nodes, Redis, the gateway, verifier workers and
daemons, provider nodes — all on loopback, with their pids, logs and settings kept in one folder."""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pydantic import SecretStr
from web3 import Web3

from marketplace import wallet
from marketplace.chain.deploy import ZEN, Deployment, Parameters, deploy
from marketplace.chain.ledger import Hardware, Ledger
from marketplace.chain.toolchain import PROJECT_ROOT, foundry_binary
from marketplace.config import Settings
from marketplace.devnet import STATE_DIR
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.process import Service, ServiceFailed, stop_all
from marketplace.devnet.redis_server import RedisServer, RedisUnavailable
from marketplace.errors import ZooError
from marketplace.processes import free_port
from marketplace.protocol.terms import Tier
from marketplace.storage import Storage

log = logging.getLogger(__name__)


PASSWORD = "devnet"  # keystores of the devnet's well-known test keys; not a secret
PARAMETERS = Parameters(
    unbonding_delay=60,
    bid_window=3,
    reveal_window=3,
    verification_window=30,  # four turns of 8 s: a drawn verifier re-runs a unit within two
    dispute_window=30,
    verification_fee=ZEN // 10,
    false_report_slash=100 * ZEN,
    governance_delay=60,  # the devnet's governor (account 0 proposes) waits a minute, not days
)
# Seconds a verifier asks for a checkpoint its provider committed before the unit fails as
# withheld: the devnet's checkpoints are pinned on its own nodes in well under a second, and its
# disputes last 30 s, not the hours a real network's do.
WITHHELD_AFTER = 10
INFRASTRUCTURE = ("anvil", "ipfs-", "redis")  # service names of what the other processes use
BLOCK_TIME = 1  # seconds between blocks once the devnet runs
REPLICAS = 3
UNLIMITED_RATE = "1000000/minute"
FUNDING = 100_000 * ZEN
ETH_FUNDING = 10_000 * 10**18  # what Anvil gives the accounts it starts with
PROVIDER_STAKE = 10_000 * ZEN
VERIFIER_STAKE = 5_000 * ZEN


class DevnetError(ZooError, RuntimeError):
    """The devnet cannot do what was asked (already running, not running, a part failed)."""


@dataclass
class Actor:
    """A devnet account; its process keeps its state in the devnet's folder of its name."""

    name: str
    index: int  # account index of Anvil's mnemonic

    @property
    def address(self) -> str:
        return devnet_account(self.index).address


@dataclass
class State:
    """What `up` started, as `down` and `status` read it back."""

    root: Path
    rpc_url: str = ""
    manifest: str = ""
    redis_url: str = ""
    gateway_url: str = ""  # the gateway's HTTP API
    ipfs: dict[str, str] = field(default_factory=dict)  # node name -> API multiaddr
    # The bearer token of every IPFS node's RPC API: one for the devnet, since each process
    # pins replicas on all the other nodes; ZOO_IPFS_API_TOKEN when set, so that a process beside
    # the devnet reading its own settings (a test, a bench) reaches its nodes too.
    ipfs_token: str = field(
        default_factory=lambda: os.environ.get("ZOO_IPFS_API_TOKEN") or secrets.token_urlsafe(32)
    )
    accounts: dict[str, str] = field(default_factory=dict)  # actor name -> address
    services: list[Service] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.root / "state.json"

    def save(self) -> None:
        data = {k: v for k, v in self.__dict__.items() if k not in ("root", "services")}
        data["services"] = [s.to_json() for s in self.services]
        self.path.write_text(json.dumps(data, indent=2))

    @classmethod
    def load(cls, root: Path) -> State:
        path = root / "state.json"
        if not path.exists():
            raise DevnetError("no devnet here: start one with `zoo-compute devnet up`")
        data = json.loads(path.read_text())
        services = [Service(**s) for s in data.pop("services")]
        return cls(root=root, services=services, **data)

    def service(self, name: str) -> Service:
        for s in self.services:
            if s.name == name:
                return s
        raise DevnetError(
            f"no service {name!r}; services: {', '.join(s.name for s in self.services)}"
        )

    def running(self) -> list[Service]:
        return [s for s in self.services if s.alive()]


def cli(*args: str) -> list[str]:
    """The argv of a `zoo-compute` command run by this interpreter."""
    return [sys.executable, "-m", "marketplace.cli", *args]


def _variable(value: object) -> str:
    """A setting as a ZOO_* variable's value: lists as JSON, secrets revealed."""
    if isinstance(value, list):
        return json.dumps(value)
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return str(value)


def write_env_file(path: Path, variables: dict[str, str]) -> None:
    """Write `variables` so that a shell's `set -a; . FILE` and Settings (python-dotenv) read the
    same values.

    Each value is single-quoted: a shell expands nothing there and keeps spaces (a JSON list has
    them). python-dotenv would still read a backslash as an escape and expand `${...}`, and a quote
    ends the value for both, so a value holding any of them is refused rather than read two ways.
    """
    for key, value in variables.items():
        if any(bad in value for bad in ("'", "\\", "${")):
            raise DevnetError(
                f"{key}={value!r} holds a quote, a backslash or ${{: "
                f"a shell and the CLI would read {path} differently"
            )
    path.write_text("".join(f"{key}='{value}'\n" for key, value in variables.items()))


def _pin_port(service: Service, address: str) -> None:
    """Record in `service`'s command line the port it was given (it started on `--port 0`), read
    from its address (a multiaddr or a URL ending in the port): a restart binds that port again."""
    port = address.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    at = service.argv.index("--port") + 1
    service.argv = [*service.argv[:at], port, *service.argv[at + 1 :]]


def _wait_listening(service: Service, probe, timeout: float) -> None:
    """Wait until `probe()` stops raising a connection error: the restarted `service` serves."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            probe()
            return
        except (OSError, httpx.TransportError, RedisUnavailable):
            if not service.alive():
                raise ServiceFailed(f"{service.name} exited: see {service.log}") from None
            if time.monotonic() > deadline:
                raise ServiceFailed(f"{service.name} not serving after {timeout:.0f}s") from None
            time.sleep(0.1)


class Devnet:
    """Starts and stops the whole local network."""

    def __init__(
        self, root: Path = STATE_DIR, providers: int = 3, verifiers: int = 2, workers: int = 1
    ):
        self.root = root
        self.providers = providers
        self.verifiers = verifiers
        self.workers = workers

    # --- up --------------------------------------------------------------------------------

    def up(self, progress=lambda message: None) -> State:
        if (self.root / "state.json").exists() and State.load(self.root).running():
            raise DevnetError("a devnet is already running: `zoo-compute devnet down` first")
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        (self.root / "password").write_text(PASSWORD)
        state = State(root=self.root)
        try:
            self._start(state, progress)
        except BaseException:
            self._stop(state)
            state.save()
            raise
        state.save()
        return state

    def _start(self, state: State, progress) -> None:
        """Processes start side by side, and the ledger is set up while Anvil mines a block per
        transaction; the chain's clock then ticks a block a second, as the market expects."""
        progress("starting Anvil, the IPFS nodes and Redis")
        anvil = self._spawn(
            state,
            "anvil",
            [
                str(foundry_binary("anvil")),
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--accounts",
                str(3 + self.providers + self.verifiers),
            ],
            os.environ.copy(),
        )
        actors = self._actors()
        state.accounts = {a.name: a.address for a in actors}
        verifiers = [a for a in actors if a.name.startswith("verifier")]
        providers = [a for a in actors if a.name.startswith("provider")]
        ipfs = {a.name: self._spawn_ipfs(state, a.name) for a in actors if a not in verifiers}
        redis = RedisServer(self.root / "redis", persist=True)
        redis.folder.mkdir(parents=True)
        redis_service = self._spawn(state, "redis", redis.argv(), os.environ.copy())
        port = anvil.wait_for_log(r"Listening on 127\.0\.0\.1:(\d+)").group(1)
        state.rpc_url = f"http://127.0.0.1:{port}"
        w3 = Web3(Web3.HTTPProvider(state.rpc_url))

        progress("deploying the ledger")
        manifest = self.root / "deployment.json"
        deployment = deploy(w3, devnet_account(0), PARAMETERS, manifest=manifest)
        state.manifest = str(manifest)
        ledger = Ledger(w3, deployment)
        self._fund(ledger, actors)
        state.ipfs = {
            name: self._ipfs_address(state, name, service) for name, service in ipfs.items()
        }
        for service in ipfs.values():
            _pin_port(service, state.ipfs[service.name.removeprefix("ipfs-")])
        redis_service.wait_for_log("(?i)ready to accept connections")
        state.redis_url = redis.url
        for actor in actors:
            wallet.save(self._settings(state, actor.name), devnet_account(actor.index), PASSWORD)

        progress("registering and staking the verifiers and providers")
        for actor in verifiers:
            account = devnet_account(actor.index)
            ledger.register_verifier(account, f"devnet://{actor.name}")
            ledger.stake(account, VERIFIER_STAKE)
        for actor in providers:
            self._register_provider(state, ledger, actor)
        w3.provider.make_request("evm_setIntervalMining", [BLOCK_TIME])

        progress("starting the gateway, the verifier workers, the verifiers and the providers")
        gateway = self.start_gateway(state)
        workers = [
            self._spawn(state, name, cli("verifier", "worker"), self._daemon_env(state, name))
            for name in (f"worker-{i}" for i in range(self.workers))
        ]
        verifier_daemons = [
            self._spawn(
                state,
                a.name,
                cli("verifier", "start", "--withheld-after", str(WITHHELD_AFTER)),
                self._daemon_env(state, a.name),
            )
            for a in verifiers
        ]
        # where the providers post their jobs' log lines
        state.gateway_url = self.gateway_url_of(gateway[0])
        _pin_port(gateway[0], state.gateway_url)
        for actor in providers:
            self._spawn_provider(state, actor)
        for worker in workers:
            worker.wait_for_log(r"ready\.", timeout=120)
        for daemon in verifier_daemons:
            daemon.wait_for_log("verifier ready", timeout=120)

        progress("waiting for the verifier to admit the providers")
        deadline = time.monotonic() + 120
        while not all(ledger.staking_account(a.address)["admitted"] for a in providers):
            for service in state.services:
                if not service.alive():
                    raise ServiceFailed(f"{service.name} exited: see {service.log}")
            if time.monotonic() > deadline:
                raise ServiceFailed("providers were not admitted in 120s: see the verifier's log")
            time.sleep(0.5)
        progress("waiting for the providers to watch the market")
        for actor in providers:
            state.service(actor.name).wait_for_log(r"ready:", timeout=120)
        progress("waiting for the gateway")
        self.wait_for_gateway(*gateway)
        # The user's settings leave the gateway out: `train` talks to the chain unless
        # ZOO_GATEWAY_URL is set.
        write_env_file(self.root / "user.env", self._variables(state, actors[0].name))

    def add_provider(self) -> str:
        """One more provider on the running devnet: funded, with its own IPFS node, registered,
        staked and its daemon started (the verifiers admit it soon after). Its address."""
        state = State.load(self.root)
        ledger = Ledger(Web3(Web3.HTTPProvider(state.rpc_url)), self.deployment())
        providers = sum(name.startswith("provider") for name in state.accounts)
        actor = Actor(f"provider-{providers}", len(state.accounts) + 1)  # the next unused account
        ledger.w3.provider.make_request("anvil_setBalance", [actor.address, hex(ETH_FUNDING)])
        self._fund(ledger, [actor])
        state.accounts[actor.name] = actor.address
        node = self._spawn_ipfs(state, actor.name)
        state.ipfs[actor.name] = self._ipfs_address(state, actor.name, node)
        _pin_port(node, state.ipfs[actor.name])
        wallet.save(self._settings(state, actor.name), devnet_account(actor.index), PASSWORD)
        self._register_provider(state, ledger, actor)
        self._spawn_provider(state, actor).wait_for_log(r"ready:", timeout=120)
        return actor.address

    def _register_provider(self, state: State, ledger: Ledger, actor: Actor) -> None:
        # The provider's side runs torch (its benchmark): loaded when a provider joins, not with the
        # CLI.
        from node.daemon import onboarding

        account = devnet_account(actor.index)
        with Storage(
            state.ipfs[actor.name], self._replicas(state, actor.name), state.ipfs_token
        ) as storage:
            _, report_cid = onboarding.publish_benchmark(
                storage, replicas=self._replica_count(state)
            )
        # a free loopback port: where a group job's rank 0 listens for the other ranks
        hardware = Hardware("cpu", 0, 0, 1, f"tcp://127.0.0.1:{free_port()}")
        onboarding.register(ledger, account, Tier.COMMUNITY, hardware, report_cid)
        onboarding.stake_with_permit(ledger, account, PROVIDER_STAKE)

    def _spawn_provider(self, state: State, actor: Actor) -> Service:
        """A provider's daemon; it posts a line to the job's log at the devnet's gateway for each
        unit it commits. A job's `file` data sources are read only from its `data` folder."""
        data = self.root / actor.name / "data"
        data.mkdir(parents=True, exist_ok=True)
        argv = cli(
            "node", "start", "--cost-floor", "1", "--replicas", str(self._replica_count(state))
        )
        argv += ["--data-dir", str(data)]
        return self._spawn(state, actor.name, argv, self._daemon_env(state, actor.name))

    def _daemon_env(self, state: State, name: str) -> dict[str, str]:
        """The environment the daemon `name` runs with: its own account's, a worker's the first
        verifier's, and a provider's also names the gateway it posts its jobs' log lines to."""
        if name.startswith("worker-"):
            return self._env(state, "verifier-0")
        env = self._env(state, name)
        if name.startswith("provider-"):
            env["ZOO_GATEWAY_URL"] = state.gateway_url
        return env

    def restart(self, name: str, timeout: float = 60.0) -> Service:
        """Start the process `name` again as `up` started it, after it died (killed, crashed), and
        wait until it serves again. A daemon's journal carries it on from where it stopped; an
        IPFS node comes back on its recorded port with its repo, Redis on its socket with its
        append-only file, the gateway's API server on its recorded port, so every process that
        knows their addresses reaches them again. Anvil is the chain: it is not restarted."""
        state = State.load(self.root)
        service = state.service(name)
        if name == "anvil":
            raise ZooError("anvil holds the chain: a devnet whose Anvil died is started anew")
        if service.alive():
            raise ZooError(f"{name} is running (pid {service.pid})")
        if name.startswith("ipfs-"):
            (self.root / "ipfs" / name.removeprefix("ipfs-") / "api").unlink(missing_ok=True)
        service.start(self._env_of(state, name), PROJECT_ROOT)
        state.save()
        if name.startswith("ipfs-"):
            self._ipfs_address(state, name.removeprefix("ipfs-"), service, timeout)
        elif name == "redis":
            _wait_listening(service, RedisServer(self.root / "redis").ping, timeout)
        elif name == "gateway":
            _wait_listening(service, lambda: httpx.get(f"{state.gateway_url}/health"), timeout)
        return service

    def _env_of(self, state: State, name: str) -> dict[str, str]:
        """The environment the process `name` runs with."""
        if name.startswith("ipfs-"):
            return os.environ.copy() | {"ZOO_IPFS_API_TOKEN": state.ipfs_token}
        if name == "redis":
            return os.environ.copy()
        return self._daemon_env(state, name)

    @staticmethod
    def _replica_count(state: State) -> int:
        return min(REPLICAS, len(state.ipfs))  # a small devnet has fewer nodes to pin on

    def start_gateway(self, state: State) -> tuple[Service, Service]:
        """The gateway's API server (a free loopback port) and its indexer, started, not yet waited
        for.

        Both share the database under the devnet's `gateway/` folder. The indexer is `gateway
        index`, the daemons' tick loop in a process of its own: it costs a request a poll while
        the chain stands still, where Celery beat's step a second costs a task's round trip.
        """
        env = self._daemon_env(state, "gateway")
        (self.root / "gateway").mkdir(exist_ok=True)
        server = self._spawn(
            state,
            "gateway",
            cli("gateway", "serve", "--host", "127.0.0.1", "--port", "0", "--log-level", "INFO"),
            env,
        )
        indexer = self._spawn(
            state, "gateway-indexer", cli("gateway", "index", "--log-level", "INFO"), env
        )
        return server, indexer

    @staticmethod
    def gateway_url_of(server: Service, timeout: float = 120.0) -> str:
        """The server's URL, once it listens."""
        return server.wait_for_log(
            r"Uvicorn running on (http://127\.0\.0\.1:\d+)", timeout=timeout
        ).group(1)

    @classmethod
    def wait_for_gateway(cls, server: Service, indexer: Service, timeout: float = 120.0) -> str:
        """The server's URL once its /health answers with a block the indexer has read."""
        url = cls.gateway_url_of(server, timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).json()["indexed_block"] is not None:
                    return url
            except httpx.TransportError:
                pass
            for service in (server, indexer):
                if not service.alive():
                    raise ServiceFailed(f"{service.name} exited: see {service.log}")
            if time.monotonic() > deadline:
                raise ServiceFailed(
                    f"the gateway indexed nothing in {timeout:.0f}s: see {indexer.log}"
                )
            time.sleep(0.2)

    def _actors(self) -> list[Actor]:
        names = (
            ["user"]
            + [f"provider-{i}" for i in range(self.providers)]
            + [f"verifier-{i}" for i in range(self.verifiers)]
        )
        return [Actor(name, i + 1) for i, name in enumerate(names)]

    def _replicas(self, state: State, name: str) -> list[str]:
        """Every other node: where an actor's content is pinned again, and read from."""
        return [addr for other, addr in state.ipfs.items() if other != name]

    def _settings(self, state: State, name: str) -> Settings:
        """The settings of a devnet process: its own IPFS node (or the user's) and its home under
        the root.

        Every field is given, so nothing comes from the environment of whoever runs `devnet up`.
        """
        return Settings(
            rpc_url=state.rpc_url,
            manifest=Path(state.manifest),
            ipfs_api=state.ipfs.get(name, state.ipfs["user"]),
            ipfs_replicas=self._replicas(state, name),
            ipfs_api_token=SecretStr(state.ipfs_token),
            redis_url=state.redis_url or Settings().redis_url,
            home=self.root / name,
            wallet_password_file=self.root / "password",
            poll_interval=0.5,
            confirmations=0,
            database_url=None,
            gateway_url=None,
            # Every devnet process reaches the gateway from the loopback address: per-address
            # limits would throttle the devnet's own daemons.
            gateway_read_limit=UNLIMITED_RATE,
            gateway_write_limit=UNLIMITED_RATE,
            wallet=None,
            wallet_password=None,
        )

    def _variables(self, state: State, name: str) -> dict[str, str]:
        """A devnet process's settings as ZOO_* variables."""
        values = self._settings(state, name).model_dump(exclude_none=True)
        return {f"ZOO_{k.upper()}": _variable(v) for k, v in values.items()}

    def _env(self, state: State, name: str) -> dict[str, str]:
        """The environment of a devnet process: this one's, with the process's settings as the only
        ZOO_* variables."""
        return {k: v for k, v in os.environ.items() if not k.startswith("ZOO_")} | self._variables(
            state, name
        )

    def _spawn_ipfs(self, state: State, name: str) -> Service:
        repo = self.root / "ipfs" / name
        (repo / "api").unlink(missing_ok=True)
        return self._spawn(
            state,
            f"ipfs-{name}",
            cli("ipfs", "serve", "--repo", str(repo), "--host", "127.0.0.1", "--port", "0"),
            os.environ.copy() | {"ZOO_IPFS_API_TOKEN": state.ipfs_token},
        )

    def _ipfs_address(
        self, state: State, name: str, service: Service, timeout: float = 60.0
    ) -> str:
        """The node's API address, once it has published it."""
        api = self.root / "ipfs" / name / "api"
        deadline = time.monotonic() + timeout
        while not api.exists():
            if not service.alive() or time.monotonic() > deadline:
                raise ServiceFailed(f"IPFS node {name} did not start: see {service.log}")
            time.sleep(0.1)
        return api.read_text().strip()

    def _fund(self, ledger: Ledger, actors: list[Actor]) -> None:
        governor = devnet_account(0)
        for actor in actors:
            ledger.transfer(governor, actor.address, FUNDING)

    def _spawn(self, state: State, name: str, argv: list[str], env: dict[str, str]) -> Service:
        service = Service(name, argv, str(self.root / "logs" / f"{name}.log")).start(
            env, PROJECT_ROOT
        )
        state.services.append(service)
        state.save()
        return service

    # --- down and status -------------------------------------------------------------------

    def down(self) -> list[str]:
        state = State.load(self.root)
        stopped = [s.name for s in state.running()]
        self._stop(state)
        # Commands read the user's settings while the file exists: they would point at a chain that
        # is gone.
        (self.root / "user.env").unlink(missing_ok=True)
        return stopped

    @staticmethod
    def _stop(state: State) -> None:
        """The processes that use the chain, IPFS and Redis first, then those."""
        users = [s for s in state.services if not s.name.startswith(INFRASTRUCTURE)]
        stop_all(users)
        stop_all([s for s in state.services if s not in users])

    def status(self) -> dict:
        """What runs and where it is; a devnet none of whose processes runs (stopped by `down`, or
        never finished starting) is refused, since its URLs and ports are of processes that are
        gone."""
        state = State.load(self.root)
        if not state.running():
            raise DevnetError(
                f"no devnet is running in {self.root}: start one with `zoo-compute devnet up` "
                f"(`zoo-compute devnet logs` shows the logs of the last one)"
            )
        chain = {}
        if state.rpc_url:
            w3 = Web3(Web3.HTTPProvider(state.rpc_url))
            if w3.is_connected():
                chain = {"block": w3.eth.block_number, "chain_id": w3.eth.chain_id}
        return {
            "rpc_url": state.rpc_url,
            "manifest": state.manifest,
            "chain": chain,
            "ipfs": state.ipfs,
            "redis_url": state.redis_url,
            "gateway_url": state.gateway_url,
            "accounts": state.accounts,
            "services": [
                {"name": s.name, "pid": s.pid, "alive": s.alive(), "log": s.log}
                for s in state.services
            ],
        }

    def deployment(self) -> Deployment:
        return Deployment.load(Path(State.load(self.root).manifest))
