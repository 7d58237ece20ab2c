"""The embedded node's own settings, from ZOO_IPFS_* environment variables."""

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from marketplace.ipfs.limits import (
    DEFAULT_CONNECTION_BOUNDS,
    DEFAULT_QUOTAS,
    DEFAULT_WALK_LIMITS,
    ConnectionBounds,
    Quotas,
    WalkLimits,
)


class NodeSettings(BaseSettings):
    """What a node reads as it starts. Not the project's Settings: a node needs none of the
    chain's settings (whose module loads web3: a second and 30 MB more for every node), and a
    node started by hand must not take a running devnet's user settings for its own.

    ZOO_IPFS_API_TOKEN is the one name both read: the token this machine's clients send is
    the one its node expects."""

    model_config = SettingsConfigDict(env_prefix="ZOO_IPFS_", extra="ignore")

    api_token: SecretStr | None = None  # the RPC API's bearer token; none: <repo>/api-token
    allowed_origins: list[str] = Field(default_factory=list)  # browser origins ("*": any)
    max_add_bytes: int = Field(DEFAULT_QUOTAS.max_add_bytes, gt=0)  # one add or block/put
    max_repo_bytes: int = Field(DEFAULT_QUOTAS.max_repo_bytes, gt=0)  # all blocks stored
    max_dag_blocks: int = Field(DEFAULT_WALK_LIMITS.max_blocks, gt=0)  # visited in one walk
    max_dag_bytes: int = Field(DEFAULT_WALK_LIMITS.max_bytes, gt=0)  # a DAG may declare
    idle_timeout_s: float = Field(DEFAULT_CONNECTION_BOUNDS.idle_s, gt=0)
    head_timeout_s: float = Field(DEFAULT_CONNECTION_BOUNDS.head_s, gt=0)
    body_silence_timeout_s: float = Field(DEFAULT_CONNECTION_BOUNDS.body_silence_s, gt=0)
    max_connections_per_client: int = Field(DEFAULT_CONNECTION_BOUNDS.per_client, gt=0)
    max_connections: int = Field(DEFAULT_CONNECTION_BOUNDS.total, gt=0)

    def quotas(self) -> Quotas:
        return Quotas(self.max_add_bytes, self.max_repo_bytes)

    def walk_limits(self) -> WalkLimits:
        return WalkLimits(self.max_dag_blocks, self.max_dag_bytes)

    def connection_bounds(self) -> ConnectionBounds:
        return ConnectionBounds(
            self.idle_timeout_s,
            self.head_timeout_s,
            self.body_silence_timeout_s,
            self.max_connections_per_client,
            self.max_connections,
        )
