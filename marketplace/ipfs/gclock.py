"""The lock that keeps garbage collection from deleting blocks an add or pin is still linking."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class GcLock:
    """Many writers (adds, block puts, pins) share it; GC takes it alone. A waiting GC blocks
    new writers, so a steady stream of adds cannot starve it forever."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._writers = 0
        self._collecting = False
        self._gc_waiting = 0

    def acquire_shared(self) -> None:
        with self._cond:
            self._cond.wait_for(self._open_to_writers)
            self._writers += 1

    def try_acquire_shared(self) -> bool:
        """Take a shared hold only if that needs no waiting (for callers that must not block)."""
        with self._cond:
            if not self._open_to_writers():
                return False
            self._writers += 1
            return True

    def _open_to_writers(self) -> bool:
        return not self._collecting and not self._gc_waiting

    def release_shared(self) -> None:
        with self._cond:
            self._writers -= 1
            self._cond.notify_all()

    @contextmanager
    def shared(self) -> Iterator[None]:
        self.acquire_shared()
        try:
            yield
        finally:
            self.release_shared()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._gc_waiting += 1
            self._cond.wait_for(lambda: not self._collecting and not self._writers)
            self._gc_waiting -= 1
            self._collecting = True
        try:
            yield
        finally:
            with self._cond:
                self._collecting = False
                self._cond.notify_all()
