"""Per-key rate limits in Redis: a fixed window counter per key, shared by every API process.

Fails open: when Redis cannot answer within a few milliseconds the request goes through
and Redis is left alone for a second, so a broker outage never stops selects and never adds
more than one timeout per second per process.
"""

from __future__ import annotations

import logging
import math
import threading
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..config import Settings
from ..errors import RateLimited
from ..ops import metrics

_log = logging.getLogger(__name__)
_PAUSE_AFTER_FAILURE = 1.0


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
        limit = self.limits.get(scope, 0)
        if limit <= 0:
            return
        now = time.time()
        if now < self._paused_until:
            metrics.RATE_LIMIT_FAIL_OPEN.inc()
            return
        window = int(now // self.window)
        name = f"toolsift:ratelimit:{subject}:{window}"
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.incr(name)
            pipe.expire(name, self.window * 2)
            count = int(pipe.execute()[0])
        except (redis.RedisError, OSError) as error:
            with self._lock:
                first = self._paused_until <= now
                self._paused_until = now + _PAUSE_AFTER_FAILURE
            if first:
                _log.warning("rate limits off for %ss: Redis: %s", _PAUSE_AFTER_FAILURE, error)
            metrics.RATE_LIMIT_FAIL_OPEN.inc()
            return
        if count > limit:
            metrics.RATE_LIMITED.labels(scope).inc()
            retry_after = max(1, math.ceil((window + 1) * self.window - now))
            raise RateLimited(
                f"more than {limit} requests in {self.window}s for this key",
                retry_after=retry_after,
            )

    def close(self) -> None:
        self.client.close()
