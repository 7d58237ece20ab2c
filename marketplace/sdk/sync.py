"""The blocking SDK: the same AsyncClient, driven on a private event loop, for scripts and the
CLI."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from typing import Self

from marketplace.jobs import Order
from marketplace.sdk.aio import AsyncClient, AsyncJob


def blocking(target, name: str, run: Callable):
    """`target.name`, and if it is a coroutine method, a function that runs it to completion with
    `run`."""
    method = getattr(target, name)
    if not asyncio.iscoroutinefunction(method):
        return method

    @functools.wraps(method)
    def call(*args, **kwargs):
        return run(method(*args, **kwargs))

    return call


class Client:
    """`Client(gateway_url, wallet=...)`: every AsyncClient method, blocking. `train` and `submit`
    return a Job.

    Not for use inside a running event loop: there, use AsyncClient.
    """

    def __init__(self, gateway_url: str, wallet=None, **options):
        self._runner = asyncio.Runner()
        self.aio = AsyncClient(gateway_url, wallet, **options)

    def run(self, awaitable):
        return self._runner.run(awaitable)

    def close(self) -> None:
        self.run(self.aio.aclose())
        self._runner.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def __getattr__(self, name: str):
        """AsyncClient's coroutine methods, run to completion here."""
        return blocking(self.aio, name, self.run)

    def train(self, config, max_budget, **order) -> Job:
        return Job(self, self.run(self.aio.train(config, max_budget, **order)))

    def submit(self, spec_text: str, order: Order) -> Job:
        return Job(self, self.run(self.aio.submit(spec_text, order)))

    def handle(self, job_id: int) -> Job:
        return Job(self, self.aio.handle(job_id))


class Job:
    """AsyncJob, blocking: `job.wait()`, `job.result()`, `for line in job.logs(follow=True)`."""

    def __init__(self, client: Client, job: AsyncJob):
        self.client = client
        self.aio = job
        self.id = job.id

    def __repr__(self) -> str:
        return f"Job({self.id})"

    def __getattr__(self, name: str):
        return blocking(self.aio, name, self.client.run)

    def logs(self, **options) -> Iterator[dict]:
        lines = self.aio.logs(**options)
        try:
            while True:
                try:
                    yield self.client.run(lines.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self.client.run(lines.aclose())
