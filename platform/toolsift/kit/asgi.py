"""A JSON answer sent from ASGI middleware, where no framework response class runs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.types import Send


async def send_json(
    send: Send, status: int, body: dict[str, Any], headers: Mapping[str, str] | None = None
) -> None:
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})
