"""A node's repository: block store, pins, identity and the lock that keeps one node per repo."""

import fcntl
import json
import logging
import os
import secrets
from pathlib import Path

from marketplace.ipfs import dagpb, multibase, reader
from marketplace.ipfs.blockstore import Blockstore
from marketplace.ipfs.cid import CID, DAG_PB
from marketplace.ipfs.errors import BlockNotFound, IpfsError
from marketplace.ipfs.gclock import GcLock
from marketplace.ipfs.limits import DEFAULT_QUOTAS, DEFAULT_WALK_LIMITS, Quotas, WalkLimits
from marketplace.ipfs.pinstore import DIRECT, RECURSIVE, PinStore

log = logging.getLogger(__name__)


class RepoLocked(IpfsError):
    """Another running node already owns this repository."""


class Repo:
    """Everything a node keeps on disk under one folder:

    blocks/      one file per block (see Blockstore)
    pins.json    the pin set
    config       the node's identity
    repo.lock    held (flock) while a node serves this repo
    api          the RPC address while serving, as Kubo writes it
    api-token    the RPC API's bearer token, readable by the owner only
    """

    def __init__(
        self,
        path: str | os.PathLike,
        quotas: Quotas = DEFAULT_QUOTAS,
        walk_limits: WalkLimits = DEFAULT_WALK_LIMITS,
    ) -> None:
        self.path = Path(path)
        self.quotas = quotas
        self.walk_limits = walk_limits
        self.path.mkdir(parents=True, exist_ok=True)
        # Held open for the node's life: the flock lasts as long as the open file.
        self._lock_file = open(self.path / "repo.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise RepoLocked(f"{self.path} is in use by another node") from None
        # Holding the lock, any api file is a dead node's: readers must not find its port.
        (self.path / "api").unlink(missing_ok=True)
        self.blocks = Blockstore(self.path / "blocks", quotas.max_repo_bytes)
        self.pins = PinStore(self.path / "pins.json")
        self.gc_lock = GcLock()
        self.peer_id = self._identity()

    def close(self) -> None:
        (self.path / "api").unlink(missing_ok=True)
        self._lock_file.close()

    def write_api_file(self, multiaddr: str) -> None:
        """Tell local tools where the RPC API is, as Kubo does with `$IPFS_PATH/api`; renamed
        into place, so whoever sees the file sees all of it."""
        tmp = self.path / "api.tmp"
        tmp.write_text(multiaddr)
        os.replace(tmp, self.path / "api")

    def api_token(self, configured: str | None = None) -> str:
        """The RPC API's bearer token: the configured one, else the one in `api-token`, made
        on first start. Local tools find it there as they find the api file; only the repo's
        owner can read it."""
        path = self.path / "api-token"
        if configured:
            return configured
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32))
        return path.read_text().strip()

    def _identity(self) -> str:
        """A stable node ID, kept in `config`. This node speaks no libp2p, so the ID is a random
        key shaped like a libp2p Ed25519 peer ID (an identity multihash of a protobuf public key)
        that tools parsing Kubo's `id` output accept."""
        config = self.path / "config"
        if config.exists():
            return json.loads(config.read_text())["Identity"]["PeerID"]
        public_key = b"\x08\x01\x12\x20" + os.urandom(32)
        peer_id = multibase.b58encode(b"\x00" + bytes([len(public_key)]) + public_key)
        config.write_text(json.dumps({"Identity": {"PeerID": peer_id}}, indent=1))
        return peer_id

    def pin(self, cid: CID, recursive: bool = True) -> None:
        with self.gc_lock.shared():
            self._pin(cid, recursive)

    def put_block(
        self, data: bytes, codec: int, version: int, hash_code: int, pin: bool = False
    ) -> CID:
        """Store one block named by its own hash; a dag-pb block must decode, since a broken
        one would make every later walk of a DAG through it fail."""
        if codec == DAG_PB:
            dagpb.decode(data)
        with self.gc_lock.shared():
            cid = self.blocks.add([data], codec, version, hash_code)
            if pin:
                self._pin(cid, recursive=True)
        return cid

    def _pin(self, cid: CID, recursive: bool) -> None:
        """Pin after checking every block the pin will keep is here: a pin promises the
        content, and this node cannot fetch missing blocks from a network. Caller holds the
        shared GC lock."""
        if recursive:
            for child, block in reader.iter_blocks(cid, self.blocks.get, self.walk_limits):
                if block is None and not self.blocks.has(child):
                    raise BlockNotFound(child)
        elif not self.blocks.has(cid):
            raise BlockNotFound(cid)
        self.pins.add(cid, RECURSIVE if recursive else DIRECT)

    def pinned(self, with_indirect: bool = True) -> dict[CID, str]:
        """Every pinned CID with its pin type, and (walking each recursive pin's DAG, so only
        when asked) the blocks kept only through one, as `indirect`."""
        result: dict[CID, str] = {}
        indirect: dict[CID, str] = {}
        seen: reader.Seen = set()
        for cid, kind in self.pins.items():
            result[cid] = kind
            if kind == RECURSIVE and with_indirect:
                for child, _ in reader.iter_blocks(cid, self.blocks.get, None, seen):
                    if child != cid:
                        indirect.setdefault(child, "indirect")
        return indirect | result

    def gc(self) -> list[CID]:
        """Delete every block no pin keeps; return what was removed. The live set is complete
        before anything is deleted, so a pinned DAG that cannot be walked (a missing or
        corrupt block) stops GC with that error rather than costing the rest of the DAG.
        The mark visits each block once over all pins, so however a pinned DAG links its
        blocks, the exclusive lock is held for at most one look at each block stored."""
        with self.gc_lock.exclusive():
            live: set[bytes] = set()
            seen: reader.Seen = set()
            for cid, kind in self.pins.items():
                if kind == DIRECT:
                    live.add(cid.multihash)
                else:
                    walk = reader.iter_blocks(cid, self.blocks.get, None, seen)
                    live.update(c.multihash for c, _ in walk)
            removed = [cid for cid in self.blocks.cids() if cid.multihash not in live]
            for cid in removed:
                self.blocks.delete(cid)
            self.blocks.remove_temporaries()
        log.info("gc removed %d blocks", len(removed))
        return removed
