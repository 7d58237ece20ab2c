"""The embedded node's own settings, from ZOO_IPFS_* environment variables."""

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from marketplace.ipfs.limits import DEFAULT_QUOTAS, DEFAULT_WALK_LIMITS, Quotas, WalkLimits


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

    def quotas(self) -> Quotas:
        return Quotas(self.max_add_bytes, self.max_repo_bytes)

    def walk_limits(self) -> WalkLimits:
        return WalkLimits(self.max_dag_blocks, self.max_dag_bytes)
