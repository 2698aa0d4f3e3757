"""API keys: `tsk_<tenant>_<key id>_<secret>`.

The tenant and key id travel in the key, so authentication is a primary-key lookup inside the
tenant's own RLS scope: no cross-tenant query, no BYPASSRLS role, and it stays shard-local
under Citus. Only a keyed hash (HMAC-SHA256 with a server pepper) is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from uuid import UUID

PREFIX = "tsk"


@dataclass(frozen=True)
class ParsedKey:
    tenant_id: UUID
    key_id: UUID
    secret: str


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def format_key(tenant_id: UUID, key_id: UUID, secret: str) -> str:
    return f"{PREFIX}_{tenant_id.hex}_{key_id.hex}_{secret}"


def display_prefix(secret: str) -> str:
    return f"{PREFIX}_…{secret[:6]}"


def parse_key(raw: str) -> ParsedKey | None:
    parts = raw.split("_", 3)
    if len(parts) != 4 or parts[0] != PREFIX or not parts[3]:
        return None
    try:
        return ParsedKey(UUID(hex=parts[1]), UUID(hex=parts[2]), parts[3])
    except ValueError:
        return None


def hash_key(raw: str, pepper: str) -> str:
    return hmac.new(pepper.encode(), raw.encode(), hashlib.sha256).hexdigest()


def matches(key_hash: str, stored_hash: str) -> bool:
    """The presented key's HMAC against the stored one, in constant time."""
    return hmac.compare_digest(key_hash, stored_hash)


class VouchedKeys:
    """Key hashes this process saw the database accept lately: their requests skip a step
    that only a guess needs. A dense select of such a key embeds its query straight away
    (the embedding, not the select, is its costly part, and a made-up key must not get it);
    a request of such a key reserves no failed authentication for its address.

    A hit only spares that step; the key is still checked on every request, so a key revoked
    within the TTL is refused at its next one."""

    def __init__(self, ttl: float = 60.0, maxsize: int = 10_000) -> None:
        self.ttl = ttl
        self.maxsize = maxsize
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()  # added to from the event loop and the thread pool

    def __contains__(self, key_hash: str) -> bool:
        until = self._until.get(key_hash)
        return until is not None and until > time.monotonic()

    def add(self, key_hash: str) -> None:
        with self._lock:
            if len(self._until) >= self.maxsize:
                now = time.monotonic()
                self._until = {k: t for k, t in self._until.items() if t > now}
                if len(self._until) >= self.maxsize:
                    self._until.pop(next(iter(self._until)))  # the oldest entry
            self._until[key_hash] = time.monotonic() + self.ttl
