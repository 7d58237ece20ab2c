"""The Celery beat schedule that keeps the gateway's database one second behind the chain."""

from __future__ import annotations

import functools

from celery import Celery

from marketplace.config import Settings
from marketplace.gateway.indexer import Indexer, open_indexer

QUEUE = "gateway"
STEP_SECONDS = 1.0

app = Celery("zoo-gateway")


@functools.cache
def _indexer() -> Indexer:
    """One indexer per worker process, built on its first task: the database holds the cursor."""
    return open_indexer(Settings())


@app.task(name="gateway.index_step", ignore_result=True)
def index_step() -> int:
    """Index what is new on the chain; the number of events stored."""
    return _indexer().step()


def configure(redis_url: str) -> Celery:
    """Point the app at a Redis broker and schedule one indexer step a second.

    A step that outlives its second makes the next ones wait on the database's write lock, so
    queued steps expire instead of piling up behind it. JSON only, as every Zoo Compute queue.
    """
    app.conf.update(
        broker_url=redis_url,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        beat_schedule={
            "index-chain": {
                "task": "gateway.index_step",
                "schedule": STEP_SECONDS,
                "options": {"expires": STEP_SECONDS},
            },
        },
    )
    return app


configure(Settings().redis_url)
