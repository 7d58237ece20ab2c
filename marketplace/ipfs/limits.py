"""How much one request may cost the node: bytes an add brings, bytes the repo holds, and the
blocks and declared bytes one walk of a DAG may reach."""

from dataclasses import dataclass

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class WalkLimits:
    """Bounds on one walk of a DAG someone else may have built. A few KB of blocks that link
    174 times to the same child, a few levels deep, declare petabytes; a walk that stops at
    these bounds (and checks every declared size on the way) refuses them at once."""

    max_blocks: int = 1 << 22  # blocks one walk visits: 1 TiB in 256 KiB chunks
    max_bytes: int = 1024 * GIB  # file bytes a DAG may declare
    max_depth: int = 32  # levels under the root; a balanced DAG of a PiB is 5 deep


@dataclass(frozen=True, slots=True)
class Quotas:
    """What writers may store: a bound per request and on the whole repo, so one client cannot
    fill the disk the node and its host share."""

    max_add_bytes: int = 64 * GIB  # bytes one add or block/put request may bring
    max_repo_bytes: int = 1024 * GIB  # bytes of blocks the repo may hold


DEFAULT_WALK_LIMITS = WalkLimits()
DEFAULT_QUOTAS = Quotas()
