"""The lines a provider adds to its jobs' logs at a gateway: one for each unit it commits."""

from __future__ import annotations

import logging
import queue
import threading

from eth_account.signers.local import LocalAccount

from marketplace.sdk import Client, GatewayError

log = logging.getLogger(__name__)

INDEX_WAIT = (
    30.0  # seconds a line waits for the gateway's index to show this provider holds the job's slot
)
RETRY_EVERY = 1.0
TIMEOUT = 10.0  # seconds for one request: a gateway that hangs costs lines, never units


class JobLog:
    """Posts lines to the gateway at `url`, signed in as the provider, from a thread of its own in
    the order given: the work never waits on the gateway, and a gateway that is down or refuses
    costs only the line (logged). A line may reach the gateway before its index shows that the
    provider holds a slot of the job (it then refuses the author), so such a line is tried again
    for a while.
    """

    def __init__(self, url: str, account: LocalAccount):
        self.url = url
        self.account = account
        self._lines: queue.Queue[tuple[int, str] | None] = queue.Queue()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-log", daemon=True)
        self._thread.start()

    def post(self, job_id: int, line: str) -> None:
        self._lines.put((job_id, line))

    def close(self, timeout: float = TIMEOUT) -> None:
        """Post what is queued, for `timeout` seconds at most, without waiting on the index any
        more."""
        self._closing.set()
        self._lines.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        with Client(
            self.url, wallet=self.account, timeout=TIMEOUT
        ) as client:  # its event loop is this thread's
            while (item := self._lines.get()) is not None:
                self._post(client, *item)

    def _post(self, client: Client, job_id: int, line: str) -> None:
        waited = 0.0
        while True:
            try:
                client.post_logs(job_id, [line])
                return
            except GatewayError as exc:
                behind = exc.status in (
                    403,
                    404,
                )  # the job or this provider's slot is not indexed yet
                if not behind or waited >= INDEX_WAIT or self._closing.wait(RETRY_EVERY):
                    log.warning("job=%d: log line not posted to %s: %s", job_id, self.url, exc)
                    return
                waited += RETRY_EVERY
