"""The Celery app that carries verification tasks from the daemon to its workers over Redis."""

from __future__ import annotations

from celery import Celery

from marketplace.config import Settings

QUEUE = "verification"
IDLE_WAIT = 10  # seconds
# A re-run is one work unit (a job's checkpoint deadline is minutes): one still running after
# this long is stopped (soft limit: the task ends with no verdict), and its process killed a
# minute later if it does not stop (hard limit).
RERUN_SECONDS = 30 * 60

app = Celery("zoo-verifier", include=["verifier.tasks"])


def configure(redis_url: str) -> Celery:
    """Point the app at a Redis broker and result backend, with settings suited to long tasks.

    A re-run takes seconds to minutes, so a worker takes one task at a time (prefetch 1) and
    acknowledges it only when done (acks_late): a worker that dies mid-run hands the unit back
    to the queue instead of losing it; a unit that keeps killing its worker (out of memory, say)
    is dead-lettered by the task after a few deliveries instead of coming back forever. A re-run
    has a time limit. JSON only: a worker never unpickles what the broker holds.
    """
    app.conf.update(
        broker_url=redis_url,
        result_backend=redis_url,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_soft_time_limit=RERUN_SECONDS,
        task_time_limit=RERUN_SECONDS + 60,
        task_default_queue=QUEUE,
        result_expires=7 * 24 * 3600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        # An idle worker's wait for a task (Redis BRPOP) times out and is sent again every this
        # many seconds, instead of every second; a task still wakes it at once.
        broker_transport_options={"polling_interval": IDLE_WAIT},
    )
    return app


configure(Settings().redis_url)
