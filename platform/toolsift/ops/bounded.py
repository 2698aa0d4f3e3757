"""A call to a database that may hang, answered within a bound.

A database that accepts connections and never answers (a stopped postmaster, a network
partition) holds a statement as long as the socket stays open: a probe or a scrape would
hang with it. The call runs in a thread of its own and the caller waits at most `timeout`;
at most one call is in flight, so a database that hangs holds one thread and one
connection, not one per probe, and callers meanwhile wait on that call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._pending: Future[T] | None = None
        self._lock = threading.Lock()

    def result(self, call: Callable[[], T], timeout: float) -> T:
        """`call()`'s result, or the one in flight's; `TimeoutError` past `timeout` s."""
        with self._lock:
            if self._pending is None or self._pending.done():
                self._pending = self._executor.submit(call)
            pending = self._pending
        return pending.result(timeout=timeout)
