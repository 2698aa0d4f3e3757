"""Ctrl-C during a long start-up, not lost to a finalizer.

Python raises KeyboardInterrupt wherever the interpreter happens to be when SIGINT arrives.
If that is a `__del__` (redis-py's connection finalizers run while servers are being polled
for readiness), the exception is printed as "Exception ignored in ..." and dropped, and the
start-up goes on as if the key had not been pressed. The handler here also remembers the
signal, and `check()` between steps raises it again.
"""

from __future__ import annotations

import signal
from types import FrameType, TracebackType
from typing import Any


class StickyInterrupt:
    def __init__(self) -> None:
        self.pending = False
        self._previous: Any = None

    def __enter__(self) -> StickyInterrupt:
        self._previous = signal.getsignal(signal.SIGINT)
        # A process started with SIGINT ignored (nohup, a background job) keeps ignoring it.
        if self._previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.pending = True
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise the interrupt that arrived since entering, if something swallowed it."""
        if self.pending:
            raise KeyboardInterrupt
