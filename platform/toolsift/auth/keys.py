"""API keys: `tsk_<tenant>_<key id>_<secret>`.

The tenant and key id travel in the key, so authentication is a primary-key lookup inside the
tenant's own RLS scope: no cross-tenant query, no BYPASSRLS role, and it stays shard-local
under Citus. Only a keyed hash (HMAC-SHA256 with a server pepper) is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
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
