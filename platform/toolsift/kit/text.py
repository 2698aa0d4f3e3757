"""Text hygiene shared by every input path."""

from __future__ import annotations

import math
import re
from typing import Any

# Control characters, and lone surrogates: a JSON escape such as "\\ud800" decodes to one, and
# no UTF-8 encoder (psycopg's included) can send it.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def scrub(text: str) -> str:
    """Query text is plain text: control characters (NUL among them) and lone surrogates
    become spaces."""
    return _CONTROL.sub(" ", text)


# What PostgreSQL text and jsonb cannot hold (NUL), or UTF-8 cannot encode (lone surrogates).
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """Why the text cannot be stored, or None."""
    if (found := _UNSTORABLE.search(text)) is None:
        return None
    return "NUL characters" if found.group() == "\x00" else "lone surrogates (invalid Unicode)"


def escape_unstorable(text: str) -> str:
    return _UNSTORABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


# Deeper JSON than any real schema or setting; pydantic refuses to serialize past 255
# levels, so a stored value any deeper could never be read back through the API.
MAX_DEPTH = 64


def too_deep(value: Any, path: str = "", depth: int = 0) -> str | None:
    """The path of the first list or object nested past `MAX_DEPTH`, or None: input that is
    only read (a tool call's arguments) is bounded too, since the validators' recursion is."""
    if not isinstance(value, dict | list):
        return None
    if depth >= MAX_DEPTH:
        return path
    if isinstance(value, dict):
        named = ((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
    else:
        named = ((f"{path}[{i}]", item) for i, item in enumerate(value))
    for here, item in named:
        if (found := too_deep(item, here, depth + 1)) is not None:
            return found
    return None


def find_unstorable(value: Any, path: str = "", depth: int = 0) -> tuple[str, str] | None:
    """The path of the first value (or key) that cannot be stored, or served back, and why."""
    if isinstance(value, str):
        return (path, why) if (why := unstorable(value)) else None
    if isinstance(value, float) and not math.isfinite(value):
        return path, "non-finite numbers (NaN, Infinity)"
    if isinstance(value, dict | list) and depth >= MAX_DEPTH:
        return path, f"values nested more than {MAX_DEPTH} levels deep"
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if why := unstorable(str(key)):
                return here, why
            if (found := find_unstorable(item, here, depth + 1)) is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            if (found := find_unstorable(item, f"{path}[{i}]", depth + 1)) is not None:
                return found
    return None
