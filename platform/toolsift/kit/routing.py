"""Request bodies are parsed as JSON (RFC 8259), not as Python's superset of it.

`json.loads` accepts `NaN`, `Infinity` and `-Infinity`; PostgreSQL's `jsonb` refuses them,
so a schema or setting holding one passed validation and failed at the INSERT as a 500.
And a body nested past the interpreter's recursion limit raised `RecursionError`, which
FastAPI answers with a 400 that names no field. Both are malformed JSON here: a 400 naming
`body`, like any other, before anything runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


def _not_json(constant: str) -> Any:
    raise json.JSONDecodeError(f"{constant} is not JSON", constant, 0)


def parse_json(body: bytes) -> Any:
    """`json.loads` without the non-standard constants, and a depth error as a decode one."""
    try:
        return json.loads(body, parse_constant=_not_json)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None


class _StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """The route class of every router: see the module's docstring."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(_StrictJSONRequest(request.scope, request.receive))

        return strict
