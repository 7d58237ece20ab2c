"""A node's repository: block store, pins, identity and the lock that keeps one node per repo."""

import fcntl
import json
import logging
import os
from pathlib import Path

from marketplace.ipfs import dagpb, multibase, reader
from marketplace.ipfs.blockstore import Blockstore
from marketplace.ipfs.cid import CID, DAG_PB
from marketplace.ipfs.errors import BlockNotFound, IpfsError
from marketplace.ipfs.gclock import GcLock
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
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
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
        self.blocks = Blockstore(self.path / "blocks")
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
            for child, block in reader.iter_blocks(cid, self.blocks.get):
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
        for cid, kind in self.pins.items():
            result[cid] = kind
            if kind == RECURSIVE and with_indirect:
                for child, _ in reader.iter_blocks(cid, self.blocks.get):
                    if child != cid:
                        indirect.setdefault(child, "indirect")
        return indirect | result

    def gc(self) -> list[CID]:
        """Delete every block no pin keeps; return what was removed. The live set is complete
        before anything is deleted, so a pinned DAG that cannot be walked (a missing or
        corrupt block) stops GC with that error rather than costing the rest of the DAG."""
        with self.gc_lock.exclusive():
            live: set[bytes] = set()
            for cid, kind in self.pins.items():
                if kind == DIRECT:
                    live.add(cid.multihash)
                else:
                    live.update(c.multihash for c, _ in reader.iter_blocks(cid, self.blocks.get))
            removed = [cid for cid in self.blocks.cids() if cid.multihash not in live]
            for cid in removed:
                self.blocks.delete(cid)
            self.blocks.remove_temporaries()
        log.info("gc removed %d blocks", len(removed))
        return removed
