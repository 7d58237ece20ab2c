"""Pins, kept in a JSON file that is replaced atomically so they survive a restart or a crash."""

import json
import logging
import os
import threading
from pathlib import Path

from marketplace.ipfs.cid import CID
from marketplace.ipfs.errors import IpfsError

log = logging.getLogger(__name__)

RECURSIVE = "recursive"
DIRECT = "direct"


class NotPinned(IpfsError, LookupError):
    """Unpinning (or asking about) a CID that has no pin of that kind."""


class PinStore:
    """CID string -> pin type. A recursive pin keeps a whole DAG, a direct pin one block."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._pins: dict[str, str] = {}
        if path.exists():
            self._pins = json.loads(path.read_text())

    def add(self, cid: CID, kind: str) -> None:
        """Record a pin; a recursive pin is never weakened to a direct one (as in Kubo)."""
        with self._lock:
            if self._pins.get(str(cid)) == RECURSIVE:
                return
            self._pins[str(cid)] = kind
            self._save()

    def remove(self, cid: CID, recursive: bool) -> None:
        with self._lock:
            kind = self._pins.get(str(cid))
            if kind is None or (kind == RECURSIVE and not recursive):
                raise NotPinned(
                    f"{cid} is not pinned"
                    if kind is None
                    else f"{cid} is pinned recursively, unpin it with recursive=true"
                )
            del self._pins[str(cid)]
            self._save()

    def items(self) -> list[tuple[CID, str]]:
        with self._lock:
            return [(CID.parse(text), kind) for text, kind in self._pins.items()]

    def _save(self) -> None:
        tmp = self._path.with_name(self._path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(self._pins, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
