"""Text hygiene shared by every input path."""

from __future__ import annotations

import re
from typing import Any

# Control characters, and lone surrogates: a JSON escape such as "\\ud800" decodes to one, and
# no UTF-8 encoder (psycopg's included) can send it.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def scrub(text: str) -> str:
    """Query text is plain text: control characters (NUL among them) and lone surrogates
    become spaces."""
    return _CONTROL.sub(" ", text)


def find_nul(value: Any, path: str = "") -> str | None:
    """The path of the first string holding NUL (PostgreSQL text and jsonb cannot store it)."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in str(key):
                return f"{path}.{key}" if path else str(key)
            if (found := find_nul(item, f"{path}.{key}" if path else str(key))) is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            if (found := find_nul(item, f"{path}[{i}]")) is not None:
                return found
    return None
