"""Per-key rate limits in Redis: a fixed window counter per key, shared by every API process.

Fails open: when Redis cannot answer within a few milliseconds the request goes through
and Redis is left alone for a second, so a broker outage never stops selects and never adds
more than one timeout per second per process.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..config import Settings
from ..errors import RateLimited
from ..ops import metrics

_log = logging.getLogger(__name__)
_PAUSE_AFTER_FAILURE = 1.0


def _counter_id(subject: str) -> str:
    """A one-way name for the key's counter: Redis (the broker, readable by every worker)
    never holds the key's hash, which the database checks keys against."""
    return hashlib.sha256(b"toolsift/ratelimit\0" + subject.encode()).hexdigest()[:32]


class RateLimiter:
    def __init__(
        self,
        redis_url: str,
        *,
        limits: dict[str, int],
        window_seconds: int,
        timeout: float,
    ) -> None:
        self.limits = limits
        self.window = window_seconds
        self.client = redis.Redis.from_url(
            redis_url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
        self.async_client = redis.asyncio.Redis.from_url(
            redis_url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=AsyncRetry(NoBackoff(), 0),
        )
        self._paused_until = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> RateLimiter | None:
        """None when there is no Redis or every limit is 0."""
        limits = {"agent": settings.rate_limit_agent, "admin": settings.rate_limit_admin}
        if not settings.redis_url or not any(limits.values()):
            return None
        return cls(
            settings.redis_url,
            limits=limits,
            window_seconds=settings.rate_limit_window_seconds,
            timeout=settings.rate_limit_redis_timeout,
        )

    def check(self, subject: str, scope: str) -> None:
        """Count one request of this key (`subject`: its HMAC); raise RateLimited past the
        scope's limit."""
        if (counter := self._counter(subject, scope)) is None:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.incr(counter)
            pipe.expire(counter, self.window * 2)
            count = int(pipe.execute()[0])
        except (redis.RedisError, OSError) as error:
            self._fail_open(error)
            return
        self._judge(count, scope)

    async def check_async(self, subject: str, scope: str) -> None:
        """`check` for the event loop (the select path), over an asyncio connection."""
        if (counter := self._counter(subject, scope)) is None:
            return
        try:
            pipe = self.async_client.pipeline(transaction=False)
            pipe.incr(counter)
            pipe.expire(counter, self.window * 2)
            count = int((await pipe.execute())[0])
        except (redis.RedisError, OSError) as error:
            self._fail_open(error)
            return
        self._judge(count, scope)

    def _counter(self, subject: str, scope: str) -> str | None:
        """This window's counter of the key, or None when nothing is to be counted."""
        if self.limits.get(scope, 0) <= 0:
            return None
        now = time.time()
        if now < self._paused_until:
            metrics.RATE_LIMIT_FAIL_OPEN.inc()
            return None
        return f"toolsift:ratelimit:{_counter_id(subject)}:{int(now // self.window)}"

    def _fail_open(self, error: Exception) -> None:
        now = time.time()
        with self._lock:
            first = self._paused_until <= now
            self._paused_until = now + _PAUSE_AFTER_FAILURE
        if first:
            _log.warning("rate limits off for %ss: Redis: %s", _PAUSE_AFTER_FAILURE, error)
        metrics.RATE_LIMIT_FAIL_OPEN.inc()

    def _judge(self, count: int, scope: str) -> None:
        limit = self.limits[scope]
        if count > limit:
            metrics.RATE_LIMITED.labels(scope).inc()
            now = time.time()
            retry_after = max(1, math.ceil((int(now // self.window) + 1) * self.window - now))
            raise RateLimited(
                f"more than {limit} requests in {self.window}s for this key",
                retry_after=retry_after,
            )

    def close(self) -> None:
        self.client.close()

    async def aclose(self) -> None:
        await self.async_client.aclose()
