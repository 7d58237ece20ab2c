"""One validated configuration for every Zoo Compute process, from ZOO_* environment variables."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from marketplace.chain.toolchain import PROJECT_ROOT

DEVNET_DIR = (
    PROJECT_ROOT / ".devnet"
)  # the state, logs and user settings of a devnet run from this checkout
DEVNET_USER_ENV = DEVNET_DIR / "user.env"  # written by `devnet up`, removed by `devnet down`


class Settings(BaseSettings):
    """Where the chain, IPFS, Redis and this process's own state are.

    Every field reads from `ZOO_<FIELD>` (e.g. ZOO_RPC_URL). While a devnet runs from this checkout,
    its user's settings (DEVNET_USER_ENV) fill the fields the environment leaves unset, for every
    command alike: `train`, `jobs`, `wallet`, `node` and `verifier` then act as the devnet's user.
    """

    model_config = SettingsConfigDict(env_prefix="ZOO_", env_file=DEVNET_USER_ENV, extra="ignore")

    rpc_url: str = "http://127.0.0.1:8545"  # JSON-RPC endpoint of the chain
    manifest: Path | None = None  # deployment manifest; default deployments/<chain id>.json
    ipfs_api: str = "/ip4/127.0.0.1/tcp/5001/http"  # this process's IPFS node (Kubo RPC API)
    ipfs_replicas: list[str] = Field(default_factory=list)  # other nodes to pin replicas on
    # Bearer token of the IPFS RPC API (Kubo's API.Authorizations), sent to every node above;
    # an embedded node reads it too (marketplace.ipfs.settings). None sends none.
    ipfs_api_token: SecretStr | None = None
    redis_url: str = "redis://127.0.0.1:6379/0"  # Celery broker and result backend
    database_url: str | None = (
        None  # the gateway's index (any SQLAlchemy URL); default SQLite in home
    )
    gateway_url: str | None = None  # a gateway's HTTP API, for `zoo-compute jobs` and the SDK
    # What users sign in to at this gateway (EIP-4361 domain, host[:port]); default: the address it
    # listens on. Set it behind a reverse proxy to the public host.
    gateway_domain: str | None = None
    gateway_read_limit: str = "600/minute"  # requests one client address may read
    gateway_write_limit: str = "60/minute"  # sign-ins, uploads and other writes per address
    gateway_upload_quota: int = 1 << 30  # dataset bytes one wallet may upload per UTC day
    home: Path = Path.home() / ".zoo-compute"  # wallets, journals and caches of this process
    wallet: Path | None = None  # keystore file; default: the only one under home/keystore
    wallet_password: SecretStr | None = None  # never a flag; or wallet_password_file
    wallet_password_file: Path | None = None
    poll_interval: float = 1.0  # seconds between chain polls
    confirmations: int = 0  # blocks a log must be buried under before a daemon acts on it

    @cached_property
    def keystore_dir(self) -> Path:
        return self.home / "keystore"

    def deployment(self, chain_id: int):
        """The ledger's manifest: ZOO_MANIFEST, else deployments/<chain id>.json."""
        from marketplace.chain.deploy import Deployment, manifest_path

        return Deployment.load(self.manifest or manifest_path(chain_id))
