"""Rate limits per client address, with the `limits` library: every request spends from a budget
for reads, and the anonymous or costly ones (sign-in, uploads, anything but a GET) from a tighter
budget for writes. Counts are kept in each server process's memory."""

from __future__ import annotations

import math
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from limits import RateLimitItem, parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


def is_write(request: Request) -> bool:
    """Whether a request spends from the write budget: it changes state, or (a sign-in nonce)
    costs the gateway something to answer."""
    return request.method not in SAFE_METHODS or request.url.path.startswith("/auth/")


def install(app: FastAPI, reads: str, writes: str) -> None:
    """Refuse a client's request with 429 once it spent its budget (`reads` or `writes`, as
    `limits` writes them: "600/minute"); a bad limit string fails at start-up."""
    budgets: dict[bool, RateLimitItem] = {False: parse(reads), True: parse(writes)}
    limiter = MovingWindowRateLimiter(MemoryStorage())

    @app.middleware("http")
    async def rate_limited(request: Request, call_next):
        write = is_write(request)
        budget = budgets[write]
        client = request.client.host if request.client else "unknown"
        kind = "write" if write else "read"
        if limiter.hit(budget, kind, client):
            return await call_next(request)
        reset = limiter.get_window_stats(budget, kind, client).reset_time
        retry = max(1, math.ceil(reset - time.time()))
        return JSONResponse(
            status_code=429,
            content={
                "detail": f"rate limit: at most {budget} {kind}s from one address; "
                f"retry in {retry} s"
            },
            headers={"Retry-After": str(retry)},
        )
