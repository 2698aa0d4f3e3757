"""The keys a process saw the database accept lately: bounded, and forgotten after the TTL."""

from __future__ import annotations

import time

from toolsift.auth.keys import VouchedKeys


def test_a_key_is_vouched_for_until_its_ttl_ends() -> None:
    vouched = VouchedKeys(ttl=0.05)
    vouched.add("a")
    assert "a" in vouched
    assert "b" not in vouched
    time.sleep(0.06)
    assert "a" not in vouched


def test_past_its_size_the_expired_go_first_then_the_oldest() -> None:
    vouched = VouchedKeys(ttl=60, maxsize=3)
    for key in ("a", "b", "c"):
        vouched.add(key)
    vouched.add("d")
    assert [k in vouched for k in "abcd"] == [False, True, True, True]
    short = VouchedKeys(ttl=0.01, maxsize=2)
    short.add("x")
    short.add("y")
    time.sleep(0.02)
    short.add("z")
    assert "z" in short
    assert len(short._until) == 1
