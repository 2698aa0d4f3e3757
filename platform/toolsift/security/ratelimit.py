"""Rate limits in Redis, shared by every API process: a fixed window counter per key, and one
of failed authentications per client address.

A made-up key is a bucket of its own, so a per-key limit alone lets a client send any number
of requests with random keys, each a key lookup in the database. So every 401 for a key
that was looked up is counted against the client's address too, and past a number of them
in a window the address's requests are refused (429) before any lookup, until the window
ends. One script reads the address's counter and counts the key's request: one round trip,
as the key's count alone took before. A request whose key this process has not seen
accepted reserves its failure in that script, so guesses sent at once cannot all pass the
check before the first 401 is counted; it gives the reservation back when the key is
accepted (`confirm`) or the request ends otherwise than in a 401 (`SettleReservations`).

Fails open: when Redis cannot answer within a few milliseconds the request goes through
and Redis is left alone for a second, so a broker outage never stops selects and never adds
more than one timeout per second per process. The addresses' failures stay bounded
meanwhile by each process's own counts (reservations in flight, 401s this window).
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..auth.keys import VouchedKeys
from ..config import Settings
from ..errors import NoCredentials, RateLimited, Unauthenticated
from ..ops import metrics

_log = logging.getLogger(__name__)
_PAUSE_AFTER_FAILURE = 1.0
#: The `scope` label of requests refused for their address's failed authentications.
FAILED_AUTH = "failed_auth"


def _counter_id(subject: str) -> str:
    """A one-way name for the key's counter: Redis (the broker, readable by every worker)
    never holds the key's hash, which the database checks keys against."""
    return hashlib.sha256(b"toolsift/ratelimit\0" + subject.encode()).hexdigest()[:32]


def scope_address(scope: Scope) -> str:
    """`client_address` of an ASGI request."""
    client = scope.get("client")
    return client_address(client[0] if client else None)


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


# A request's one round trip. KEYS: its address's failed authentications this window, its
# key's requests in this scope (an unused name under the prefix where one is not counted: a
# Redis ACL may allow `toolsift:*` only). ARGV: the address's limit, the counters' TTL, and
# three flags: read the address's count; count the key's request; reserve a failure for the
# address (the key is not known good: a burst of guesses cannot all pass the check before
# any of them is counted). A blocked address's request is neither counted against the key it
# presents nor reserved. Returns {failures, requests}.
_CHECK = """
local failed = 0
if ARGV[3] == '1' then
  failed = tonumber(redis.call('GET', KEYS[1]) or '0')
  if failed >= tonumber(ARGV[1]) then return {failed, 0} end
  if ARGV[5] == '1' then
    redis.call('INCR', KEYS[1])
    redis.call('EXPIRE', KEYS[1], ARGV[2])
  end
end
local count = 0
if ARGV[4] == '1' then
  count = redis.call('INCR', KEYS[2])
  if count == 1 then redis.call('EXPIRE', KEYS[2], ARGV[2]) end
end
return {failed, count}
"""
# A reservation given back: the request did not end in a 401.
_RELEASE = """
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then return redis.call('DECR', KEYS[1]) end
return 0
"""
_UNUSED = "toolsift:ratelimit:unused"
_ASYNC_CONNECTIONS = 64


def _saturated(error: Exception) -> bool:
    """This process's connections were all busy (a burst), not a Redis that failed."""
    return isinstance(error, redis.exceptions.MaxConnectionsError) or (
        isinstance(error, redis.exceptions.ConnectionError)
        and isinstance(error.__cause__, TimeoutError)
    )


#: Where a request keeps its reserved failure: the ASGI scope's state (`Request.state`).
RESERVED = "toolsift_reserved_failure"


@dataclass
class Reservation:
    """A failure counted for a client address before its key was looked up: in this process
    (a bound on such requests in flight that holds when Redis does not answer) and, once
    the check's script ran, in Redis."""

    address: str
    subject: str  # the key's HMAC
    failures: str  # the address's counter of this window
    in_redis: bool = False


@dataclass(frozen=True)
class _Check:
    """One request's counters in this window: its address's failures and its key's requests
    (None for one not limited), and the failure it reserved before the lookup, if any."""

    scope: str
    subject: str
    address: str
    failures: str | None
    counter: str | None
    reservation: Reservation | None

    @property
    def keys(self) -> list[str]:
        return [self.failures or _UNUSED, self.counter or _UNUSED]

    def args(self, limit: int, ttl: int) -> list[int]:
        flags = (self.failures, self.counter, self.reservation)
        return [limit, ttl, *(int(f is not None) for f in flags)]


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
        # The event loop may hold many more checks at once than there are connections: they
        # wait for one (as long as for an answer) instead of failing, and a wait that runs
        # out fails that check open, not every check for a second (Redis is not down).
        self.async_client = redis.asyncio.Redis.from_pool(  # owns the pool: closes it
            redis.asyncio.BlockingConnectionPool.from_url(
                redis_url,
                max_connections=_ASYNC_CONNECTIONS,
                timeout=timeout,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=AsyncRetry(NoBackoff(), 0),
            )
        )
        # EVALSHA, loaded on first use and again after a Redis restart.
        self._script = self.client.register_script(_CHECK)
        self._async_script = self.async_client.register_script(_CHECK)
        self._release = self.async_client.register_script(_RELEASE)
        self._release_sync = self.client.register_script(_RELEASE)
        # Keys the database accepted lately: their requests reserve no failure. Nor do more
        # requests of a key whose first one holds a reservation: a burst of one key is its
        # own rate limit's, and a client's first requests after a restart come in parallel.
        self.vouched = VouchedKeys()
        self._pending: set[str] = set()
        self._in_flight: Counter[str] = Counter()  # reservations by address, this process
        # Checks run on the event loop and in the thread pool (sync routes, /mcp's lookup).
        self._reserving = threading.Lock()
        # This window's 401s per address as this process counted them: the bound that holds
        # while Redis is not answering (paused, or slow under a burst), per process.
        self._failed_here: Counter[str] = Counter()
        self._failed_window = 0
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

    def check(
        self,
        subject: str,
        scope: str,
        address: str | None = None,
        hold: MutableMapping[str, Any] | None = None,
    ) -> None:
        """Count one request of this key (`subject`: its HMAC); raise RateLimited past the
        scope's limit, or when the client `address` is past the failed authentications'.

        With `hold` (the request's state) and a key neither vouched for nor already holding
        one, a failure is reserved for the address and kept in `hold[RESERVED]`: the request
        settles it (`settle`), giving it back unless it ended in a 401."""
        if (check := self._check(subject, scope, address, hold)) is None:
            return
        try:
            failed, count = self._script(check.keys, check.args(self.failed_auth, self._ttl))
        except (redis.RedisError, OSError) as error:
            self._fail_open(error, check.reservation)
            return
        self._judge(check, int(failed), int(count))

    async def check_async(
        self,
        subject: str,
        scope: str,
        address: str | None = None,
        hold: MutableMapping[str, Any] | None = None,
    ) -> None:
        """`check` for the event loop (the select path), over an asyncio connection."""
        if (check := self._check(subject, scope, address, hold)) is None:
            return
        try:
            args = check.args(self.failed_auth, self._ttl)
            failed, count = await self._async_script(check.keys, args)
        except (redis.RedisError, OSError) as error:
            self._fail_open(error, check.reservation)
            return
        self._judge(check, int(failed), int(count))

    def confirm(self, subject: str, hold: MutableMapping[str, Any] | None = None) -> None:
        """The database accepted this key: its next requests reserve nothing, and this one
        gives its reservation back now, not when it ends (an MCP stream may last hours)."""
        self.vouched.add(subject)
        reservation = None if hold is None else hold.pop(RESERVED, None)
        if reservation is not None and self._unreserve(reservation):
            try:
                self._release_sync([reservation.failures], [])
            except (redis.RedisError, OSError) as error:
                self._pause(error)

    async def confirm_async(self, subject: str, hold: MutableMapping[str, Any]) -> None:
        """`confirm` for the event loop."""
        self.vouched.add(subject)
        if (reservation := hold.pop(RESERVED, None)) is not None:
            await self.settle(reservation, refused=False)

    async def settle(self, reservation: Reservation, *, refused: bool) -> None:
        """The end of a request that reserved a failure (`hold[RESERVED]`): a 401 keeps it as
        the failure it counts (counted now if Redis never saw it); any other end gives it
        back."""
        in_redis = self._unreserve(reservation)
        if refused:
            self._count_here(reservation.address)
            if not in_redis:
                await self._count_in_redis(reservation.address)
            return
        if not in_redis:
            return
        try:
            await self._release([reservation.failures], [])
        except (redis.RedisError, OSError) as error:
            self._pause(error)

    async def count_refusal(self, error: Exception, scope: Scope) -> None:
        """A request refused on its way out: a 401 for a presented key is one failed
        authentication of the client's address, unless the request reserved it already.
        No key, or none shaped like one, looked nothing up: no guess, not counted."""
        guess = isinstance(error, Unauthenticated) and not isinstance(error, NoCredentials)
        if guess and RESERVED not in scope.get("state", {}):
            await self.count_failure(scope_address(scope))

    async def count_failure(self, address: str) -> None:
        """One failed authentication (a 401) from this client address; on the event loop,
        and only on the way out of a refused request."""
        if self.failed_auth <= 0:
            return
        self._count_here(address)
        await self._count_in_redis(address)

    def _unreserve(self, reservation: Reservation) -> bool:
        """This process's part of ending a reservation; whether Redis holds it too."""
        with self._reserving:
            self._pending.discard(reservation.subject)
            self._in_flight[reservation.address] -= 1
            if self._in_flight[reservation.address] <= 0:
                del self._in_flight[reservation.address]
        return reservation.in_redis

    def _count_here(self, address: str) -> None:
        window = self._window_index()
        with self._reserving:
            if window != self._failed_window:
                self._failed_here.clear()
                self._failed_window = window
            self._failed_here[address] += 1

    def _refuse_if_failed_here(self, address: str) -> None:
        """The address past its limit by this process's own count of its 401s: refused
        whatever Redis says (or does not)."""
        with self._reserving:
            failed = (
                self._failed_here[address] if self._failed_window == self._window_index() else 0
            )
        if failed >= self.failed_auth:
            raise self._blocked(failed)

    async def _count_in_redis(self, address: str) -> None:
        if time.time() < self._paused_until:
            return
        failures = self._failures(address, self._window_index())
        try:
            pipe = self.async_client.pipeline(transaction=False)
            pipe.incr(failures)
            pipe.expire(failures, self._ttl)
            await pipe.execute()
        except (redis.RedisError, OSError) as error:
            self._pause(error)

    def _window_index(self) -> int:
        return int(time.time() // self.window)

    def _failures(self, address: str, window: int) -> str:
        return f"toolsift:authfail:{_counter_id('address:' + address)}:{window}"

    def _check(
        self,
        subject: str,
        scope: str,
        address: str | None,
        hold: MutableMapping[str, Any] | None,
    ) -> _Check | None:
        """What this process settles of the request before any round trip (the address's own
        counts here, its reservation), and the counters Redis is to check; None when Redis
        is not to be asked (nothing limited, or paused)."""
        count = self.limits.get(scope, 0) > 0
        if self.failed_auth <= 0:
            address = None
        if not count and address is None:
            return None
        window = self._window_index()
        failures = None
        reservation = None
        if address is not None:
            failures = self._failures(address, window)
            self._refuse_if_failed_here(address)
            if hold is not None:
                reservation = self._reserve(address, subject, failures, hold)
        if self._paused():
            return None
        counter = f"toolsift:ratelimit:{_counter_id(subject)}:{scope}:{window}"
        return _Check(
            scope=scope,
            subject=subject,
            address=address or "",
            failures=failures,
            counter=counter if count else None,
            reservation=reservation,
        )

    @property
    def _ttl(self) -> int:
        return 2 * self.window

    def _pause(self, error: Exception) -> None:
        if _saturated(error):
            return  # this process's connections were busy: Redis is not down
        now = time.time()
        with self._lock:
            first = self._paused_until <= now
            self._paused_until = now + _PAUSE_AFTER_FAILURE
        if first:
            _log.warning("rate limits off for %ss: Redis: %s", _PAUSE_AFTER_FAILURE, error)

    def _paused(self) -> bool:
        """Redis failed a moment ago: requests go through unchecked (the local bound on
        reservations in flight still holds)."""
        if time.time() < self._paused_until:
            metrics.RATE_LIMIT_FAIL_OPEN.inc()
            return True
        return False

    def _fail_open(self, error: Exception, reservation: Reservation | None = None) -> None:
        if reservation is not None and isinstance(error, redis.TimeoutError):
            # Sent, and not answered in time: the script most likely ran (a slow Redis), so
            # a good key gives the reservation back (the release never goes below zero).
            reservation.in_redis = True
        self._pause(error)
        metrics.RATE_LIMIT_FAIL_OPEN.inc()

    def _reserve(
        self, address: str, subject: str, failures: str, hold: MutableMapping[str, Any]
    ) -> Reservation | None:
        """For a key neither vouched for nor already holding one, count the request among
        this process's reservations for its address, before any round trip: past the failed
        authentications' limit of them in flight at once, the address is refused here, Redis
        answering or not (a burst of guesses)."""
        if subject in self.vouched:
            return None
        with self._reserving:
            if subject in self._pending:
                return None
            in_flight = self._in_flight[address]
            if in_flight < self.failed_auth:
                self._in_flight[address] += 1
                self._pending.add(subject)
        if in_flight >= self.failed_auth:
            raise self._refusal(
                FAILED_AUTH,
                f"{in_flight} requests with keys not yet accepted in flight from this address",
            )
        reservation = Reservation(address, subject, failures)
        hold[RESERVED] = reservation
        return reservation

    def _judge(self, check: _Check, failed: int, count: int) -> None:
        """The address first: a blocked one is refused whatever key it presents, valid or
        not, since telling them apart is the database lookup the block saves."""
        if check.failures is not None and failed >= self.failed_auth:
            raise self._blocked(failed)
        if check.reservation is not None:
            check.reservation.in_redis = True  # the script counted it, not being refused
        if check.counter is not None and count > (limit := self.limits[check.scope]):
            raise self._refusal(
                check.scope, f"more than {limit} requests in {self.window}s for this key"
            )

    def _blocked(self, failed: int) -> RateLimited:
        """The address is past its failed authentications in this window."""
        return self._refusal(
            FAILED_AUTH, f"{failed} failed authentications in {self.window}s from this address"
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


class SettleReservations:
    """Gives back the failure a request reserved for its address (`RateLimiter.check` with a
    key not vouched for) unless the request ended in a 401: its key was good, or was never
    judged (a 503, a 429). A 401 keeps it as the failure it counts."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        status = 0

        async def watching(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watching)
        finally:
            reservation = state.pop(RESERVED, None)
            limiter = getattr(scope["app"].state, "rate_limiter", None)
            if reservation is not None and limiter is not None:
                await limiter.settle(reservation, refused=status == 401)
