"""Encryption at rest for what a source needs to reach its server (headers, token, env).

Fernet (AES-128-CBC with HMAC-SHA256, from `cryptography`), keyed by a SHA-256 of the
server's `TOOLSIFT_SECRET_KEY`. A database dump or backup alone does not reveal a source's
credentials, and a value only ever leaves the process towards the MCP server it belongs to.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.fernet import Fernet, InvalidToken


class SecretsUnreadable(Exception):
    """The stored secrets do not decrypt with this server's key (it changed)."""


@dataclass(frozen=True)
class SourceSecrets:
    headers: dict[str, str] = field(default_factory=dict)
    bearer_token: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def values(self) -> list[str]:
        """Every secret value, for scrubbing error messages."""
        out = [*self.headers.values(), *self.env.values()]
        if self.bearer_token:
            out.append(self.bearer_token)
        return [v for v in out if v]


def _fernet(secret_key: str) -> Fernet:
    digest = hashlib.sha256(b"toolsift/mcp-source-secrets\0" + secret_key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(secret_key: str, secrets: SourceSecrets) -> bytes | None:
    if not (secrets.headers or secrets.bearer_token or secrets.env):
        return None
    body = {"headers": secrets.headers, "bearer_token": secrets.bearer_token, "env": secrets.env}
    return _fernet(secret_key).encrypt(json.dumps(body).encode())


def unseal(secret_key: str, token: bytes | None) -> SourceSecrets:
    if not token:
        return SourceSecrets()
    try:
        body = json.loads(_fernet(secret_key).decrypt(bytes(token)))
    except InvalidToken:
        raise SecretsUnreadable(
            "the source's stored secrets do not decrypt with this server's TOOLSIFT_SECRET_KEY;"
            " set them again"
        ) from None
    return SourceSecrets(
        headers=dict(body.get("headers") or {}),
        bearer_token=body.get("bearer_token"),
        env=dict(body.get("env") or {}),
    )


def scrub(text: str, secrets: SourceSecrets) -> str:
    """`text` with every secret value, and the forms a server may quote it in (URL-quoted
    for a path, a query or a form, JSON-escaped), replaced."""
    return scrub_values(text, secrets.values())


def scrub_values(text: str, values: Sequence[str]) -> str:
    """`scrub` for values alone (what a fetch knows of a source's secrets)."""
    from urllib.parse import quote, quote_plus

    forms = {
        form
        for value in values
        for form in (
            value,
            quote(value, safe=""),
            quote(value),
            quote_plus(value),
            quote_plus(value, safe="/"),
            json.dumps(value)[1:-1],
        )
        if len(form) >= 4
    }
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, "[redacted]")
    return text
