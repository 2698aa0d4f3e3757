"""Rate limits in Redis, shared by every API process: a fixed window counter per key, and one
of failed authentications per client address.

A made-up key is a bucket of its own, so a per-key limit alone lets a client send any number
of requests with random keys, each a key lookup in the database. So every 401 for a key
that was looked up is counted against the client's address too, and past a number of them
in a window the address's requests are refused (429) before any lookup, until the window
ends. One script reads the address's counter and counts the key's request: one round trip,
as the key's count alone took before.

Fails open: when Redis cannot answer within a few milliseconds the request goes through
and Redis is left alone for a second, so a broker outage never stops selects and never adds
more than one timeout per second per process.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import threading
import time
from dataclasses import dataclass

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
#: The `scope` label of requests refused for their address's failed authentications.
FAILED_AUTH = "failed_auth"


def _counter_id(subject: str) -> str:
    """A one-way name for the key's counter: Redis (the broker, readable by every worker)
    never holds the key's hash, which the database checks keys against."""
    return hashlib.sha256(b"toolsift/ratelimit\0" + subject.encode()).hexdigest()[:32]


def client_address(host: str | None) -> str:
    """What failed authentications are counted by: the client's IPv4 address, or the /64 of
    its IPv6 one (a subscriber's usual allocation, in which one client could take a new
    address per guess). `host` is the ASGI client, which uvicorn takes from X-Forwarded-For
    only when the peer is a trusted proxy (`TOOLSIFT_FORWARDED_ALLOW_IPS`)."""
    if not host:
        return "unknown"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host[:64]  # not an address (a unix socket's peer): counted as it is
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


# A request's one round trip. KEYS: its address's failed authentications this window and its
# key's requests ('' for one not limited); ARGV: the address's limit, the key counter's TTL.
# A blocked address's request is not counted against the key it presents. Returns
# {failures, requests}.
_CHECK = """
local failed = 0
if KEYS[1] ~= '' then
  failed = tonumber(redis.call('GET', KEYS[1]) or '0')
  if failed >= tonumber(ARGV[1]) then return {failed, 0} end
end
local count = 0
if KEYS[2] ~= '' then
  count = redis.call('INCR', KEYS[2])
  if count == 1 then redis.call('EXPIRE', KEYS[2], ARGV[2]) end
end
return {failed, count}
"""


@dataclass(frozen=True)
class _Check:
    """One request's counters in this window: its address's failures, its key's requests
    (None for one not limited)."""

    scope: str
    failures: str | None
    counter: str | None

    @property
    def keys(self) -> list[str]:
        return [self.failures or "", self.counter or ""]


class RateLimiter:
    def __init__(
        self,
        redis_url: str,
        *,
        limits: dict[str, int],
        window_seconds: int,
        timeout: float,
        failed_auth: int = 0,
    ) -> None:
        self.limits = limits
        self.failed_auth = failed_auth
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
        # EVALSHA, loaded on first use and again after a Redis restart.
        self._script = self.client.register_script(_CHECK)
        self._async_script = self.async_client.register_script(_CHECK)
        self._paused_until = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> RateLimiter | None:
        """None when there is no Redis or every limit is 0."""
        limits = {
            "agent": settings.rate_limit_agent,
            "admin": settings.rate_limit_admin,
            "operator": settings.rate_limit_operator,
        }
        failed_auth = settings.rate_limit_failed_auth
        if not settings.redis_url or (max(limits.values()) <= 0 and failed_auth <= 0):
            return None
        return cls(
            settings.redis_url,
            limits=limits,
            window_seconds=settings.rate_limit_window_seconds,
            timeout=settings.rate_limit_redis_timeout,
            failed_auth=failed_auth,
        )

    def check(self, subject: str, scope: str, address: str | None = None) -> None:
        """Count one request of this key (`subject`: its HMAC); raise RateLimited past the
        scope's limit, or when the client `address` is past the failed authentications'."""
        if (check := self._check(subject, scope, address)) is None:
            return
        try:
            failed, count = self._script(check.keys, self._args)
        except (redis.RedisError, OSError) as error:
            self._fail_open(error)
            return
        self._judge(check, int(failed), int(count))

    async def check_async(self, subject: str, scope: str, address: str | None = None) -> None:
        """`check` for the event loop (the select path), over an asyncio connection."""
        if (check := self._check(subject, scope, address)) is None:
            return
        try:
            failed, count = await self._async_script(check.keys, self._args)
        except (redis.RedisError, OSError) as error:
            self._fail_open(error)
            return
        self._judge(check, int(failed), int(count))

    async def count_failure(self, address: str) -> None:
        """One failed authentication (a 401) from this client address; on the event loop,
        and only on the way out of a refused request."""
        if self.failed_auth <= 0 or time.time() < self._paused_until:
            return
        failures = self._failures(address, self._window_index())
        try:
            pipe = self.async_client.pipeline(transaction=False)
            pipe.incr(failures)
            pipe.expire(failures, 2 * self.window)
            await pipe.execute()
        except (redis.RedisError, OSError) as error:
            self._pause(error)

    def _window_index(self) -> int:
        return int(time.time() // self.window)

    def _failures(self, address: str, window: int) -> str:
        return f"toolsift:authfail:{_counter_id('address:' + address)}:{window}"

    def _check(self, subject: str, scope: str, address: str | None) -> _Check | None:
        """This window's counters of the request, or None when nothing is to be checked."""
        count = self.limits.get(scope, 0) > 0
        if self.failed_auth <= 0:
            address = None
        if not count and address is None:
            return None
        if time.time() < self._paused_until:
            metrics.RATE_LIMIT_FAIL_OPEN.inc()
            return None
        window = self._window_index()
        return _Check(
            scope=scope,
            failures=None if address is None else self._failures(address, window),
            counter=f"toolsift:ratelimit:{_counter_id(subject)}:{window}" if count else None,
        )

    @property
    def _args(self) -> list[int]:
        return [self.failed_auth, 2 * self.window]

    def _pause(self, error: Exception) -> None:
        now = time.time()
        with self._lock:
            first = self._paused_until <= now
            self._paused_until = now + _PAUSE_AFTER_FAILURE
        if first:
            _log.warning("rate limits off for %ss: Redis: %s", _PAUSE_AFTER_FAILURE, error)

    def _fail_open(self, error: Exception) -> None:
        self._pause(error)
        metrics.RATE_LIMIT_FAIL_OPEN.inc()

    def _judge(self, check: _Check, failed: int, count: int) -> None:
        """The address first: a blocked one is refused whatever key it presents, valid or
        not, since telling them apart is the database lookup the block saves."""
        if check.failures is not None and failed >= self.failed_auth:
            raise self._refusal(
                FAILED_AUTH, f"{failed} failed authentications in {self.window}s from this address"
            )
        if check.counter is not None and count > (limit := self.limits[check.scope]):
            raise self._refusal(
                check.scope, f"more than {limit} requests in {self.window}s for this key"
            )

    def _refusal(self, label: str, message: str) -> RateLimited:
        metrics.RATE_LIMITED.labels(label).inc()
        now = time.time()
        retry_after = max(1, math.ceil((int(now // self.window) + 1) * self.window - now))
        return RateLimited(message, retry_after=retry_after)

    def close(self) -> None:
        self.client.close()

    async def aclose(self) -> None:
        await self.async_client.aclose()
