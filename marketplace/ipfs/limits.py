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


@dataclass(frozen=True, slots=True)
class ConnectionBounds:
    """What one client may hold of the node's sockets and time (a slowloris holds a socket, a
    task and buffers for each connection it opens and then leaves silent). Silence is bounded,
    not totals: a multi-GiB add that keeps sending is never cut off."""

    idle_s: float = 10.0  # from connecting to a request's first byte
    head_s: float = 20.0  # from a request's first byte to its head's end
    body_silence_s: float = 30.0  # between two reads of a body the node is ready to read
    per_client: int = 64  # connections open at once from one IP address
    total: int = 1024  # connections open at once from anyone (each holds a file descriptor)


DEFAULT_CONNECTION_BOUNDS = ConnectionBounds()
