"""Ctrl-C that lands in a finalizer is lost to Python, and remembered by StickyInterrupt."""

from __future__ import annotations

import os
import signal

import pytest

from toolsift.kit.interrupts import StickyInterrupt


class InterruptedWhileFinalised:
    """Delivers SIGINT while its `__del__` runs, as a Ctrl-C during redis-py's cleanup does."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at the next bytecode boundary, in here
            pass


@pytest.mark.usefixtures("interruptible")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_interrupt_swallowed_by_a_finalizer_is_raised_at_the_next_check() -> None:
    # Without it: the KeyboardInterrupt is printed as "Exception ignored" and dropped.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        InterruptedWhileFinalised()
    finally:
        signal.signal(signal.SIGINT, previous)

    with StickyInterrupt() as interrupts:
        interrupts.check()  # nothing pending yet
        InterruptedWhileFinalised()
        assert interrupts.pending
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert signal.getsignal(signal.SIGINT) is previous


def test_an_ignored_interrupt_stays_ignored() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StickyInterrupt() as interrupts:
            os.kill(os.getpid(), signal.SIGINT)
            interrupts.check()
            assert not interrupts.pending
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
