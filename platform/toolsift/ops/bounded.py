"""A call to a database that may hang, answered within a bound.

A database that accepts connections and never answers (a stopped postmaster, a network
partition) holds a statement as long as the socket stays open: a probe or a scrape would
hang with it. The call runs in a daemon thread of its own (a hung one must not hold up the
process's exit) and the caller waits at most `timeout`. At most one call is in flight, so a
database that hangs holds one thread and one connection, not one per probe, and callers
meanwhile wait on that call; one in flight for longer than `abandon_after` is given up, so
a single stuck connection does not answer for a database that serves new ones again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    def __init__(self, name: str, *, abandon_after: float = 30.0) -> None:
        self.name = name
        self.abandon_after = abandon_after
        self._pending: Future[T] | None = None
        self._started = 0.0
        self._lock = threading.Lock()

    def result(self, call: Callable[[], T], timeout: float) -> T:
        """`call()`'s result, or the one in flight's; `TimeoutError` past `timeout` s."""
        with self._lock:
            stale = time.monotonic() - self._started > self.abandon_after
            if self._pending is None or self._pending.done() or stale:
                self._pending, self._started = self._start(call), time.monotonic()
            pending = self._pending
        return pending.result(timeout=timeout)

    def _start(self, call: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(call())
            except BaseException as error:  # handed to the caller, as an executor would
                future.set_exception(error)

        threading.Thread(target=run, name=self.name, daemon=True).start()
        return future
