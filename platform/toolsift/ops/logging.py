"""Structured logs: one JSON object a line, each with the request id; secrets scrubbed.

Redaction happens in the formatter, on the final text (message, arguments and traceback
alike), so no code path can log an API key, a bearer token or a configured secret.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ..config import Settings

request_id: ContextVar[str | None] = ContextVar("toolsift_request_id", default=None)

# tsk_<tenant>_<key>_<secret>, and anything after "Bearer ".
_PATTERNS = [
    re.compile(r"tsk_[0-9a-fA-F]{32}_[0-9a-fA-F]{32}_[A-Za-z0-9_\-]+"),
    re.compile(r"(?i)(bearer\s+)[^\s'\",]+"),
    re.compile(
        r"(?i)((?:password|secret|token|pepper|api[_-]?key)[\"']?\s*[:=]\s*[\"']?)[^\s'\",&}]+"
    ),
    re.compile(r"(postgres(?:ql)?(?:\+psycopg)?://[^:/@\s]+:)[^@\s]+(@)"),
    re.compile(r"(rediss?://[^:/@\s]*:)[^@\s]+(@)"),
]
REDACTED = "[redacted]"
_HANDLER_NAME = "toolsift"
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "request_id"}


class Redactor:
    """Scrubs key-shaped strings, bearer tokens, URL passwords and the given secrets."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            text = pattern.sub(
                lambda m: (
                    (m.group(1) if m.re.groups >= 1 else "")
                    + REDACTED
                    + (m.group(2) if m.re.groups >= 2 else "")
                ),
                text,
            )
        return text


class _RequestId(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        # Each text before it is escaped: a secret holding a quote, a backslash or a
        # character beyond ASCII is written escaped, and would no longer match.
        return json.dumps(self._scrubbed(entry))

    def _scrubbed(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {self.redact(str(k)): self._scrubbed(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._scrubbed(v) for v in value]
        if value is None or isinstance(value, bool | int | float):
            return value
        return self.redact(str(value))


class TextFormatter(logging.Formatter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self.redact(super().format(record))


def configure(
    *,
    fmt: str = "json",
    level: str = "INFO",
    secrets: Iterable[str | None] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Route the root logger and uvicorn's loggers through one scrubbing handler (idempotent)."""
    redact = Redactor(secrets)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(_RequestId())
    handler.setFormatter(JsonFormatter(redact) if fmt == "json" else TextFormatter(redact))
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
    # The app logs every request itself (`toolsift.access`, with its request id, probes
    # left out). uvicorn logs access when its logger has a handler, its ancestors' included:
    # without this, every request would be logged twice, query strings and probes too.
    logging.getLogger("uvicorn.access").propagate = False
    return handler


def configure_from(
    settings: Settings, *, level: str | None = None, stream: TextIO | None = None
) -> logging.Handler:
    """The deployment's format, level and secrets: the API, the worker and beat alike."""
    return configure(
        fmt=settings.log_format,
        level=level or settings.log_level,
        secrets=[
            settings.key_pepper,
            settings.operator_key,
            settings.embedding_http_token,
            settings.secret_key,
            settings.metrics_token,
        ],
        stream=stream,
    )
